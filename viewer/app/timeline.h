// timeline.h: the timeline widget: a time ruler, then per run a collapsible group per rank with
// its lanes (CPU threads, streams) and its memory counters.
//
// Mouse: wheel zooms at the cursor (Ctrl+wheel scrolls), drag pans, Shift+drag selects a time
// range, click selects a slice. Keys (as Perfetto and chrome://tracing): W/S zoom, A/D pan,
// F fits the selection, Home fits everything.
#pragma once

#include "app.h"

namespace shardlab::viewer::app {

// Draws into the current window, using `height` pixels (ruler included).
void timeline(AppState& app, float height);

}  // namespace shardlab::viewer::app
