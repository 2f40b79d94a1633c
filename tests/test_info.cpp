#include <gtest/gtest.h>

#include "attnkit/core/blas_core.h"
#include "attnkit/core/info.h"

namespace attnkit {
namespace {

TEST(Info, ClassifiesBlasLibrariesByPath) {
  EXPECT_EQ(classify_blas_library("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3").name,
            "OpenBLAS");
  auto ref = classify_blas_library("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0");
  EXPECT_EQ(ref.name, "reference BLAS");
  EXPECT_TRUE(ref.is_reference);
  EXPECT_FALSE(classify_blas_library("/usr/lib/x86_64-linux-gnu/libopenblas.so.0").is_reference);
  EXPECT_EQ(classify_blas_library("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3").name,
            "BLIS");
}

// The project's setup installs OpenBLAS; this fails if the process ends up on another BLAS.
TEST(Info, TheLiveBlasIsOpenBlas) {
  auto blas = detect_blas();
  EXPECT_FALSE(blas.library.empty());
  EXPECT_EQ(blas.name, "OpenBLAS") << blas.library;
  EXPECT_FALSE(blas.is_reference);
}

// The cores the two machines of the measurement ran by default, and the ones they could run.
TEST(Info, RanksOpenBlasCoresByTheirWidestInstructions) {
  EXPECT_EQ(openblas_core_level("Prescott"), 0);
  EXPECT_EQ(openblas_core_level("Sandybridge"), 1);
  EXPECT_EQ(openblas_core_level("HASWELL"), 2);
  EXPECT_EQ(openblas_core_level("Zen"), 2);
  EXPECT_EQ(openblas_core_level("SkylakeX"), 3);
  EXPECT_EQ(openblas_core_level("Cooperlake"), 3);
  EXPECT_EQ(openblas_core_level("Neoversev1"), -1);
  EXPECT_EQ(best_openblas_core({"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"}),
            "SkylakeX");
  // AVX-512F alone (Knights Landing) is not what the SkylakeX kernels need.
  EXPECT_EQ(best_openblas_core({"avx", "avx2", "fma", "avx512f"}), "Haswell");
  EXPECT_EQ(best_openblas_core({"avx", "avx2"}), "Sandybridge");
  EXPECT_EQ(best_openblas_core({"sse4_2"}), "Prescott");
}

TEST(Info, MeasuresTheLiveSgemmRate) {
  const double gflops = measure_sgemm_gflops(/*n=*/128, /*seconds=*/0.01);
  EXPECT_GT(gflops, 0.1);
  EXPECT_LT(gflops, 1e4);  // one core: far below any CPU's peak at this size
  EXPECT_FALSE(live_openblas_core().empty());
  EXPECT_GE(openblas_core_level(live_openblas_core()), 0) << live_openblas_core();
}

TEST(Info, ReportsVersionsAndThreads) {
  set_threads(1);
  auto info = runtime_info();
  EXPECT_EQ(info.torch_version.rfind("1.13", 0), 0u) << info.torch_version;
  EXPECT_EQ(info.intra_op_threads, 1);
  EXPECT_GE(info.hardware_threads, 1u);
}

// Only one of the two busy-waiting pools may own the cores.
TEST(Info, ThreadPoliciesGiveTheCoresToOnePool) {
  set_threads(2, ThreadPolicy::Blas);
  EXPECT_EQ(configured_threads(), 2);
  EXPECT_EQ(runtime_info().intra_op_threads, 1);
  EXPECT_NE(detect_blas().detail.find(", 2 threads"), std::string::npos) << detect_blas().detail;
  EXPECT_EQ(blas_threads(), 2);
  {
    ScopedBlasThreads single(1);
    EXPECT_EQ(blas_threads(), 1);
  }
  EXPECT_EQ(blas_threads(), 2) << "the guard restores the count it found";
  set_threads(2, ThreadPolicy::IntraOp);
  EXPECT_EQ(runtime_info().intra_op_threads, 2);
  EXPECT_NE(detect_blas().detail.find(", 1 threads"), std::string::npos) << detect_blas().detail;
  EXPECT_EQ(blas_threads(), 1);
  set_threads(2, ThreadPolicy::Kernels);  // attnkit's own threads: neither pool gets any
  EXPECT_EQ(configured_threads(), 2);
  EXPECT_EQ(configured_policy(), ThreadPolicy::Kernels);
  EXPECT_EQ(runtime_info().intra_op_threads, 1);
  EXPECT_EQ(blas_threads(), 1);
  set_threads(1);
}

}  // namespace
}  // namespace attnkit
