// The encoder's worker threads: a few kept for the life of the process. Why not a new std::thread
// per call: each thread owns a piece cache (piece_cache.h), and a fresh thread starts cold (a cold
// cache costs about a third of the speed on a 16 MB block); kept threads keep theirs warm across
// the blocks of a file. Calls that want threads are serialized (one job at a time); the caller
// works too.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace bpe::enc {

class Pool {
  public:
    // Runs `job` on n threads (the caller's and n - 1 workers) and waits for all; an exception
    // thrown by any of them is rethrown here.
    void run(size_t n, std::function<void()> job);

  private:
    void loop(size_t index);
    std::mutex run_mutex_, m_;
    std::condition_variable cv_, done_;
    std::vector<std::thread> workers_;
    std::function<void()> job_;
    std::exception_ptr worker_err_;
    uint64_t gen_ = 0;
    size_t want_ = 0, active_ = 0;
};

// The process's pool, made again in a forked child (a child inherits no threads).
Pool &pool();

// Runs `work` on n threads (n <= 1: on this one, no pool).
template <class F>
void run_threads(size_t n, F &work) {
    if (n <= 1) {
        work();
        return;
    }
    pool().run(n, std::function<void()>(std::ref(work)));
}

}  // namespace bpe::enc
