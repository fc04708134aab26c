// deltaserve-kernel-lab sections in small_gemm_lab.cu: the small-batch GEMM over split rows against
// the dispatch it replaced (--gemm-split), and its int8 twin against it (--gemm-int8).
#pragma once

void gemm_split(int reps);
void gemm_int8(int reps);
