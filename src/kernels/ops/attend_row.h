#pragma once

// Private to src/kernels: one query's scaled-dot attention over its own keys and values, as a
// decoding step attends over a row's self-attention cache and over its sentence's source.
//
//   w_j = softmax_j over the kept j of scale (q · K_j)   (keep nullptr: every j kept)
//   ctx = sum_j w_j V_j                                   q [d], K and V [n, d] rows d apart
//
// A row with nothing kept gives ctx = 0 and w = 0 (no NaN).
//
// Why it exists: the Transformer's beam search called a dot product and an axpy per key and
// head, 8.5 % of a beam-5 decoding's samples. With full-width AVX-512 and d a multiple of 16 (the
// Transformer's d = 64), q and ctx live in registers for the whole row and the exponentials run
// 16 at a time: 5.9 % of the samples, the search about 3 % faster (bench/compare_transformer.py).
//
// Every weight depends only on its own key and the row's maximum, the sum of the exponentials
// runs over j in ascending order, and ctx's two partial sums take the even and the odd keys: a
// source padded at the end with keys nobody keeps gives the same bits as the source alone, so a
// batch decodes each sentence as it decodes alone.
//
// Reference: the portable path (simd::dot, masked_softmax_row, simd::axpy), and a double
// softmax in tests/test_attend_row.cpp, which holds every ISA to it.

#include <cstdint>

namespace attnkit::kernels {

// weights [n] receives w.
void attend_row(const float* q, const float* keys, const float* values, int64_t n, int64_t d,
                const bool* keep, float scale, float* weights, float* ctx);

// The same with position j's key at keys[j] and its value at values[j] (d floats each): a beam's
// self-attention cache, whose earlier positions its ancestors wrote and its sibling beams share.
// The same bits as the rows copied together.
void attend_row(const float* q, const float* const* keys, const float* const* values, int64_t n,
                int64_t d, const bool* keep, float scale, float* weights, float* ctx);

}  // namespace attnkit::kernels
