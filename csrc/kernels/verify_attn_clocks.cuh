// Phase clocks of the verify_attn kernels (the seesaw and decode tiles): a measuring build
// (-DKD_ATTN_PHASE_CLOCKS, csrc/dev/verify_attn_clocks.cuh). In the library the marks are empty.
#pragma once

#if defined(KD_ATTN_PHASE_CLOCKS) && defined(__CUDACC__) && !defined(KD_SIMT_EMULATION)
#include "dev/verify_attn_clocks.cuh"
#else
#define ATTN_CLK_DECL ((void)0)
#define ATTN_CLK_LAP(slot) ((void)0)
#define ATTN_CLK_FLUSH(tiles) ((void)0)
#endif
