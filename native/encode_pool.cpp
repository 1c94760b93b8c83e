// The encoder's worker threads (encode_pool.h says why they are kept).
#include "encode_pool.h"

#include <unistd.h>

namespace bpe::enc {

void Pool::run(size_t n, std::function<void()> job) {
    std::lock_guard<std::mutex> one_job(run_mutex_);
    std::unique_lock<std::mutex> lk(m_);
    while (workers_.size() + 1 < n) workers_.emplace_back([this, i = workers_.size()] { loop(i); });
    job_ = std::move(job);
    want_ = n - 1;
    active_ = n - 1;
    ++gen_;
    lk.unlock();
    cv_.notify_all();
    std::exception_ptr err;
    try {
        job_();
    } catch (...) {
        err = std::current_exception();
    }
    lk.lock();
    done_.wait(lk, [&] { return active_ == 0; });
    job_ = nullptr;
    if (!err) err = worker_err_;
    worker_err_ = nullptr;
    if (err) std::rethrow_exception(err);
}

void Pool::loop(size_t index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
        cv_.wait(lk, [&] { return gen_ != seen; });
        seen = gen_;
        if (index >= want_) continue;
        lk.unlock();
        std::exception_ptr e;
        try {
            job_();
        } catch (...) {  // e.g. bad_alloc: handed to the caller, never lost in a thread
            e = std::current_exception();
        }
        lk.lock();
        if (e && !worker_err_) worker_err_ = e;
        if (--active_ == 0) done_.notify_one();
    }
}

// Never destroyed: idle workers block on a condition variable and end with the process.
Pool &pool() {
    static Pool *p = nullptr;
    static pid_t owner = 0;
    static std::mutex m;
    std::lock_guard<std::mutex> lk(m);
    if (p == nullptr || owner != getpid()) {
        p = new Pool();
        owner = getpid();
    }
    return *p;
}

}  // namespace bpe::enc
