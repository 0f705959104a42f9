// panels.h: everything around the timeline: the toolbar (search, category filter, compare
// alignment) and the tabs below it (details, steps, range metrics, comparison).
#pragma once

#include "app.h"

namespace shardlab::viewer::app {

enum Tab { tab_details, tab_steps, tab_range, tab_compare };
const char* tab_name(int tab);  // "Details", ... ("" for none)

void toolbar(AppState& app);
void panels(AppState& app);

}  // namespace shardlab::viewer::app
