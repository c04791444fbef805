#ifndef ASYNCPS_NET_FIFO_H_
#define ASYNCPS_NET_FIFO_H_

#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace asyncps::net {

// A first-in first-out queue that reuses its storage: popping only advances the front, and
// once the queue is empty it starts over at the front of the same vector, so a queue that
// drains now and then (a connection's send queue) allocates nothing in steady traffic. A
// std::deque of a connection's queued frames allocated a block every three frames. A queue
// that never drains drops its popped front once it is half the storage, so memory stays
// bounded by what is queued.
//
// Not thread-safe. Popped elements are destroyed when the storage is reused or compacted,
// not at pop_front: move what is needed out of front() before popping.
template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  T& front() { return items_[head_]; }
  void push_back(T item) { items_.push_back(std::move(item)); }
  void pop_front() {
    if (++head_ == items_.size()) {
      items_.clear();  // keeps the capacity for what comes next
      head_ = 0;
    } else if (head_ >= kCompactAfter && head_ * 2 >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  typename std::vector<T>::iterator begin() { return items_.begin() + static_cast<std::ptrdiff_t>(head_); }
  typename std::vector<T>::iterator end() { return items_.end(); }
  void swap(Fifo& other) {
    items_.swap(other.items_);
    std::swap(head_, other.head_);
  }
  // Elements the storage holds, popped ones included (for tests).
  size_t storage_size() const { return items_.size(); }

  static constexpr size_t kCompactAfter = 64;

 private:
  std::vector<T> items_;
  size_t head_ = 0;  // items_[0, head_) were popped
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_FIFO_H_
