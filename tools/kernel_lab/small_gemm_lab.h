// deltaserve-kernel-lab section in small_gemm_lab.cu: the small-batch GEMM over split rows against
// the dispatch it replaced (--gemm-split).
#pragma once

void gemm_split(int reps);
