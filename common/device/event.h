// event.h: streams and events, the two words of asynchronous GPU programming.
//
// A Stream is a queue of device work that runs in order. An Event marks a point in a stream's
// queue: another stream can wait for it (device-side, the CPU does not block) and the CPU can
// synchronize on it or query it. Each device implements EventState its own way: the sim keeps a
// virtual time and a vector clock, CUDA keeps a cudaEvent_t.
#pragma once

#include <memory>
#include <string>

namespace shardlab {

class Device;

class Stream {
 public:
  Stream(Device& device, int id, std::string name) : device_(device), id_(id), name_(std::move(name)) {}
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const { return device_; }
  int id() const { return id_; }  // the trace's tid for this stream's lane
  const std::string& name() const { return name_; }

 private:
  Device& device_;
  int id_;
  std::string name_;
};

struct EventState {
  virtual ~EventState() = default;
};

// A recorded point in one stream's work. Cheap to copy (shared state); empty when default-made.
struct Event {
  std::shared_ptr<EventState> state;
  int stream_id = -1;  // the stream it was recorded on
  explicit operator bool() const { return state != nullptr; }
};

}  // namespace shardlab
