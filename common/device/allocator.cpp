// allocator.cpp: the caching allocator described in allocator.h.
//
// Data layout, chosen so that the common cached allocate/free pair costs a few map operations:
// - A Segment is one raw_alloc. Its Blocks form a doubly linked list in address order, so a
//   freed block finds its neighbours in O(1) to merge with them.
// - Every free block sits in one ordered index keyed by (stream, pool, size, segment, offset).
//   A best-fit lookup is one lower_bound on (stream, pool, size): the first entry at or after it
//   is the smallest block of that stream's pool that is large enough, ties going to the oldest
//   segment and lowest offset so that reuse is deterministic.
// - Blocks freed while another stream may still use them wait in a pending list with their
//   events and join the index only once every event has completed.
#include "device/allocator.h"

#include <algorithm>
#include <compare>
#include <iterator>
#include <utility>

#include "trace/metrics.h"

namespace shardlab {

namespace {

// "1.50 GiB (1610612736 bytes)": readable, and still exact for anyone comparing numbers.
std::string format_bytes(size_t bytes) {
  return human_bytes(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " bytes)";
}

// A small request shares a 2 MiB segment; a mid-size one a 20 MiB segment, whose rest serves
// later large requests; a big one gets a segment of its own, with little slack.
size_t segment_size(size_t rounded_size) {
  if (rounded_size <= CachingAllocator::kSmallRequest) return CachingAllocator::kSmallSegment;
  if (rounded_size < CachingAllocator::kMinLargeAlloc) return CachingAllocator::kLargeSegment;
  const size_t round = CachingAllocator::kRoundLarge;
  return (rounded_size + round - 1) / round * round;
}

std::string describe(uint64_t id, const std::string& label) {
  return "allocation " + std::to_string(id) + " (\"" + label + "\")";
}

}  // namespace

struct CachingAllocator::Block {
  enum class State { free, live, pending };

  Segment* segment;
  uint64_t offset;
  size_t size;
  Block* prev = nullptr;  // address-order neighbours inside the segment
  Block* next = nullptr;
  State state = State::free;
  // Streams other than the segment's own that use the block (record_stream); each gets an
  // event when the block is freed.
  std::vector<Stream*> other_streams;
  std::vector<Event> pending_events;  // while pending: the events not yet seen complete

  Block(Segment* seg, uint64_t off, size_t bytes) : segment(seg), offset(off), size(bytes) {}
};

struct CachingAllocator::Segment {
  uint64_t id;
  void* base;  // nullptr when the backend has no real memory
  size_t bytes;
  int stream_id;
  bool small_pool;
  // The block at offset 0. Merging always keeps the lower block, so this one is never deleted
  // while the segment exists; the segment owns the whole list through it.
  Block* first;

  Segment(uint64_t segment_id, void* memory, size_t size, int stream, bool small)
      : id(segment_id), base(memory), bytes(size), stream_id(stream), small_pool(small),
        first(new Block(this, 0, size)) {}
  ~Segment() {
    while (first != nullptr) delete std::exchange(first, first->next);
  }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // The segment holds no live or pending block exactly when everything merged back into one.
  bool empty() const { return first->state == Block::State::free && first->size == bytes; }
};

struct CachingAllocator::Impl {
  // Orders free blocks for best fit: by pool (stream, small or large), then size, then position.
  struct FreeKey {
    int stream_id;
    bool small_pool;
    size_t size;
    uint64_t segment;
    uint64_t offset;
    auto operator<=>(const FreeKey&) const = default;
  };
  struct Record {
    std::string label;
    Block* block = nullptr;  // set while the allocation is live
    bool zero_size = false;  // owns nothing; freeing it is a no-op
  };

  std::map<uint64_t, std::unique_ptr<Segment>> segments;  // by id: oldest first
  std::map<FreeKey, Block*> free_blocks;
  std::vector<Block*> pending_blocks;
  // Every allocation ever made, so that labels survive the free (race reports name them).
  std::unordered_map<uint64_t, Record> records;
  uint64_t next_allocation_id = 1;
  uint64_t next_segment_id = 1;

  static FreeKey key_of(const Block* block) {
    return {block->segment->stream_id, block->segment->small_pool, block->size,
            block->segment->id, block->offset};
  }
  void index_free(Block* block) { free_blocks.emplace(key_of(block), block); }
  void unindex_free(const Block* block) { free_blocks.erase(key_of(block)); }
};

CachingAllocator::CachingAllocator(AllocatorBackend& backend, size_t capacity_bytes)
    : impl_(std::make_unique<Impl>()), backend_(backend), capacity_(capacity_bytes) {}

CachingAllocator::~CachingAllocator() {
  for (const auto& [id, segment] : impl_->segments)
    backend_.raw_free(segment->base, segment->bytes);
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

Allocation CachingAllocator::allocate(size_t bytes, Stream& stream, std::string_view label) {
  process_pending_blocks();
  Impl& impl = *impl_;
  if (bytes == 0) {
    const uint64_t id = impl.next_allocation_id++;
    impl.records.emplace(id, Impl::Record{std::string(label), nullptr, true});
    return Allocation{nullptr, id, 0, 0, 0, 0};
  }

  const size_t size = round_size(bytes);
  const bool small_pool = size <= kSmallRequest;
  const int stream_id = stream.id();
  Block* block = find_free_block(stream_id, small_pool, size);
  if (block == nullptr) {
    const size_t segment_bytes = segment_size(size);
    std::string refusal;
    if (segment_bytes <= capacity_ - reserved_) block = allocate_segment(segment_bytes, stream_id, small_pool, &refusal);
    if (block == nullptr) {
      // Out of room, by this allocator's count or by the device's (CUDACachingAllocator's
      // release_cached_blocks): wait for the device, so that every pending block completes,
      // give every segment that holds no live block back, and ask for the segment again.
      backend_.synchronize_device();
      ++stats_.sync_all_streams;
      process_pending_blocks();
      const size_t released = release_empty_segments();
      ++stats_.alloc_retries;
      backend_.allocator_event({AllocatorEventKind::alloc_retry, size, stream_id, released, label});
      if (segment_bytes <= capacity_ - reserved_)
        block = allocate_segment(segment_bytes, stream_id, small_pool, &refusal);
      if (block == nullptr) {
        ++stats_.ooms;
        backend_.allocator_event({AllocatorEventKind::out_of_memory, size, stream_id, 0, label});
        throw_out_of_memory(size, stream, label, refusal);
      }
    }
  }

  split_block(block, size);
  block->state = Block::State::live;
  allocated_ += block->size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  peak_active_ = std::max(peak_active_, allocated_ + pending_);
  note_change();

  const uint64_t id = impl.next_allocation_id++;
  impl.records.emplace(id, Impl::Record{std::string(label), block, false});
  const Segment& segment = *block->segment;
  void* ptr = segment.base == nullptr ? nullptr : static_cast<char*>(segment.base) + block->offset;
  return Allocation{ptr, id, segment.id, block->offset, block->size, bytes};
}

void CachingAllocator::free(uint64_t id) {
  const auto it = impl_->records.find(id);
  if (it == impl_->records.end())
    throw std::logic_error("CachingAllocator::free: unknown allocation " + std::to_string(id));
  Impl::Record& record = it->second;
  if (record.zero_size) return;
  if (record.block == nullptr)
    throw std::logic_error("CachingAllocator::free: " + describe(id, record.label) +
                           " was already freed");

  Block* block = std::exchange(record.block, nullptr);
  allocated_ -= block->size;
  note_change();
  if (block->other_streams.empty()) {
    return_to_pool(block);
    return;
  }
  // Other streams may still have work queued on this memory: hold the block back until an
  // event recorded on each of them now has completed.
  for (Stream* other : block->other_streams)
    block->pending_events.push_back(backend_.record_event(*other));
  block->other_streams.clear();
  block->state = Block::State::pending;
  pending_ += block->size;
  impl_->pending_blocks.push_back(block);
}

void CachingAllocator::record_stream(uint64_t id, Stream& stream) {
  const auto it = impl_->records.find(id);
  if (it == impl_->records.end())
    throw std::logic_error("CachingAllocator::record_stream: unknown allocation " +
                           std::to_string(id));
  const Impl::Record& record = it->second;
  if (record.zero_size) return;  // no memory, nothing to protect
  if (record.block == nullptr)
    throw std::logic_error("CachingAllocator::record_stream: " + describe(id, record.label) +
                           " was already freed");
  Block& block = *record.block;
  // The allocating stream orders its own reuse; only foreign streams need an event.
  if (stream.id() == block.segment->stream_id) return;
  const bool known = std::any_of(block.other_streams.begin(), block.other_streams.end(),
                                 [&](const Stream* s) { return s->id() == stream.id(); });
  if (!known) block.other_streams.push_back(&stream);
}

void CachingAllocator::empty_cache() {
  process_pending_blocks();
  release_empty_segments();
}

bool CachingAllocator::is_live(uint64_t id) const {
  const auto it = impl_->records.find(id);
  return it != impl_->records.end() && it->second.block != nullptr;
}

std::string CachingAllocator::label(uint64_t id) const {
  const auto it = impl_->records.find(id);
  return it == impl_->records.end() ? std::string() : it->second.label;
}

void CachingAllocator::reset_peaks() {
  peak_allocated_ = allocated_;
  peak_reserved_ = reserved_;
  peak_active_ = allocated_ + pending_;
}

size_t CachingAllocator::segments() const { return impl_->segments.size(); }

size_t CachingAllocator::cached_bytes() const { return reserved_ - allocated_; }

// Best fit: the smallest free block of this stream's pool that holds `size`, taken out of the
// index.
CachingAllocator::Block* CachingAllocator::find_free_block(int stream_id, bool small_pool,
                                                           size_t size) {
  auto& free_blocks = impl_->free_blocks;
  const auto it = free_blocks.lower_bound(Impl::FreeKey{stream_id, small_pool, size, 0, 0});
  if (it == free_blocks.end() || it->first.stream_id != stream_id ||
      it->first.small_pool != small_pool)
    return nullptr;
  Block* block = it->second;
  free_blocks.erase(it);
  return block;
}

// A new segment from the device, returned as its single block (not in the free index).
CachingAllocator::Block* CachingAllocator::allocate_segment(size_t segment_bytes, int stream_id, bool small_pool,
                                                            std::string* refusal) {
  void* memory = nullptr;
  try {
    memory = backend_.raw_alloc(segment_bytes);
  } catch (const OutOfMemory& e) {
    *refusal = e.what();
    return nullptr;
  }
  const uint64_t id = impl_->next_segment_id++;
  auto segment = std::make_unique<Segment>(id, memory, segment_bytes, stream_id, small_pool);
  Block* block = segment->first;
  impl_->segments.emplace(id, std::move(segment));
  reserved_ += segment_bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++stats_.segment_mallocs;
  backend_.allocator_event({AllocatorEventKind::segment_malloc, segment_bytes, stream_id, 0, {}});
  note_change();
  return block;
}

// Cut `block` down to `size` when the rest is worth keeping as a block of its own: any 512 B in
// the small pool; in the large pool only more than 1 MiB, so that large segments do not
// fragment into slivers that no large request can use.
void CachingAllocator::split_block(Block* block, size_t size) {
  const size_t remaining = block->size - size;
  const bool worth_splitting =
      block->segment->small_pool ? remaining >= kMinBlock : remaining > kSmallRequest;
  if (!worth_splitting) return;
  // The rest is free and its next neighbour is not (free neighbours are always merged).
  Block* rest = new Block(block->segment, block->offset + size, remaining);
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  impl_->index_free(rest);
}

// Mark `block` free, merge it with free neighbours and put the result in the index.
void CachingAllocator::return_to_pool(Block* block) {
  block->state = Block::State::free;
  if (Block* prev = block->prev; prev != nullptr && prev->state == Block::State::free) {
    impl_->unindex_free(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->state == Block::State::free) {
    impl_->unindex_free(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  impl_->index_free(block);
}

// Return every pending block whose events have all completed to its pool.
void CachingAllocator::process_pending_blocks() {
  auto& pending = impl_->pending_blocks;
  for (size_t i = 0; i < pending.size();) {
    Block* block = pending[i];
    auto& events = block->pending_events;
    // Forget completed events, so that each is queried until done and no further.
    std::erase_if(events, [&](const Event& event) { return backend_.event_done(event); });
    if (!events.empty()) {
      ++i;
      continue;
    }
    pending[i] = pending.back();
    pending.pop_back();
    pending_ -= block->size;
    return_to_pool(block);
  }
}

// Give every segment with no live or pending block back to the device.
size_t CachingAllocator::release_empty_segments() {
  auto& segments = impl_->segments;
  size_t released = 0;
  for (auto it = segments.begin(); it != segments.end();) {
    Segment& segment = *it->second;
    if (!segment.empty()) {
      ++it;
      continue;
    }
    impl_->unindex_free(segment.first);
    backend_.raw_free(segment.base, segment.bytes);
    reserved_ -= segment.bytes;
    released += segment.bytes;
    ++stats_.segment_frees;
    backend_.allocator_event({AllocatorEventKind::segment_free, segment.bytes, segment.stream_id, 0, {}});
    it = segments.erase(it);
  }
  if (released > 0) note_change();
  return released;
}

void CachingAllocator::note_change() { backend_.memory_changed(allocated_, reserved_); }

void CachingAllocator::throw_out_of_memory(size_t size, const Stream& stream, std::string_view label,
                                           const std::string& refusal) const {
  throw OutOfMemory("out of memory: tried to allocate " + format_bytes(size) + " (\"" +
                    std::string(label) + "\") on stream " + std::to_string(stream.id()) +
                    "; allocated " + format_bytes(allocated_) + ", reserved " +
                    format_bytes(reserved_) + ", capacity " + format_bytes(capacity_) +
                    (refusal.empty() ? "" : "; the device refused: " + refusal));
}

}  // namespace shardlab
