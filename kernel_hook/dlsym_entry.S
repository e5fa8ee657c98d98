/* The exported dlsym (see dlsym_hook.cc): asks xt_dlsym_pick, and when it
   returns NULL, tail-jumps to the real dlsym so that the real one sees the
   caller's return address (RTLD_NEXT is relative to it). x86-64 only; on
   other machines dlsym is not interposed (docs/kernel_hook.md). */
#if defined(__x86_64__)
        .text
        .globl  dlsym
        .type   dlsym, @function
        .hidden xt_dlsym_pick
        .hidden xt_real_dlsym_ptr
        .p2align 4
dlsym:
        .cfi_startproc
        .byte   0xf3, 0x0f, 0x1e, 0xfa      /* endbr64: a nop without CET */
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp                     /* 16-byte alignment at the call */
        .cfi_adjust_cfa_offset 8
        call    xt_dlsym_pick
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        jnz     1f
        jmpq    *xt_real_dlsym_ptr(%rip)
1:
        ret
        .cfi_endproc
        .size   dlsym, .-dlsym
#endif
        .section .note.GNU-stack, "", @progbits
