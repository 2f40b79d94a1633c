#pragma once

#include <cstdint>
#include <functional>

// Lanes: independent pieces of work run at once, one thread each, every kernel a lane calls kept
// on its thread (OnePartPerThread). For callers that have as many independent pieces as cores,
// where sharing each product between the threads would make them wait for each other through
// every serial stretch between the products: the trainer's parts of a batch (train/trainer.cpp).
namespace attnkit::kernels {

// fn(lane) for every lane in [0, lanes), on min(lanes, configured threads) threads of the
// kernels' pool, the caller one of them; a thread with more than one lane runs its lanes in
// increasing order. A thread whose lanes have all run then takes parts of the kernels of the
// lanes still running (the kernels' results do not depend on how many parts share them): equal
// lanes on cores of unequal speed no longer leave the faster core waiting. Returns when all have
// run; the first exception thrown is rethrown. What a lane computes must not depend on which
// thread runs it.
void run_lanes(int64_t lanes, const std::function<void(int64_t)>& fn);

}  // namespace attnkit::kernels
