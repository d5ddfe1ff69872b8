// The SIMT emulator's two inner loops, compiled optimised (the kernels that include
// simt_emulator.h build at -O1): the fiber context switch (x86-64) and the tensor-core
// product behind the emulated mma.sync and wgmma.
#include <cstddef>

namespace kdemu {

// P (rows x n, row-major) = A B with A given k-major (at[k * rows + r]) and B as n columns
// of k values (b[col * k_dim + k]). float, as the tensor cores accumulate (the bf16 products
// are exact in it); each sum runs over k in order, for all rows at once so it vectorises.
void tensor_core_product(const float* at, int rows, const float* b, int n, int k_dim, float* p) {
  constexpr int kMaxRows = 16;  // a warp's share of an mma / wgmma tile
  for (int col = 0; col < n; ++col) {
    float acc[kMaxRows] = {};
    const float* bc = b + static_cast<size_t>(col) * k_dim;
    for (int k = 0; k < k_dim; ++k) {
      const float bk = bc[k];
      const float* ak = at + static_cast<size_t>(k) * rows;
      for (int r = 0; r < kMaxRows; ++r) acc[r] += ak[r] * bk;
    }
    for (int r = 0; r < rows; ++r) p[static_cast<size_t>(r) * n + col] = acc[r];
  }
}

}  // namespace kdemu

#if defined(__x86_64__)
// Save the callee-saved registers on the current stack, store its pointer to *save_sp,
// switch to load_sp and pop the registers saved there (or a fresh frame from make_context).
// The SSE/x87 control words are not switched: no kernel changes them.
asm(R"(
  .text
  .globl kdemu_switch_context
  .type kdemu_switch_context, @function
kdemu_switch_context:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kdemu_switch_context, .-kdemu_switch_context
)");
#endif
