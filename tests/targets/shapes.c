/* Hand-written machine code for the splicing hazards, so their shape does
 * not depend on the compiler. The C callers keep the tally. */
#include "tally.h"

int loophead(int n, int acc);   /* entry is the loop head */
int tiny_padded(void);           /* 1 byte (ret), alignment padding after it */
int tiny_packed(void);           /* 3 bytes, next function right after it */
int after_tiny(void);
int riprel(int x);               /* RIP-relative load at entry */
int short_entry(int x);          /* 1- and 2-byte instructions at entry */
int endbr(int x);                /* endbr64 prologue */
int tailcaller(int x);           /* ends in a tail call to short_entry */
int target_inside(int n);        /* a branch target 2 bytes into the entry */
int redzone(int a, int b);       /* leaf keeping values in the red zone */
int needs_trap(int n);           /* 1-byte entry, loop head right after, an indirect jump */
int shapes_var = 40;

__asm__(
    ".text\n"
    ".p2align 4\n.globl loophead\n.type loophead,@function\n"
    "loophead:\n"
    "  lea (%rdi,%rsi), %esi\n"
    "  sub $1, %edi\n"
    "  jg loophead\n"
    "  mov %esi, %eax\n"
    "  ret\n"
    ".size loophead, .-loophead\n"
    ".p2align 4\n.globl tiny_padded\n.type tiny_padded,@function\n"
    "tiny_padded:\n"
    "  ret\n"
    ".size tiny_padded, .-tiny_padded\n"
    ".p2align 4\n.globl tiny_packed\n.type tiny_packed,@function\n"
    "tiny_packed:\n"
    "  xor %eax, %eax\n"
    "  ret\n"
    ".size tiny_packed, .-tiny_packed\n"
    ".globl after_tiny\n.type after_tiny,@function\n"
    "after_tiny:\n"
    "  mov $1, %eax\n"
    "  ret\n"
    ".size after_tiny, .-after_tiny\n"
    ".p2align 4\n.globl riprel\n.type riprel,@function\n"
    "riprel:\n"
    "  mov shapes_var(%rip), %eax\n"
    "  add %edi, %eax\n"
    "  ret\n"
    ".size riprel, .-riprel\n"
    ".p2align 4\n.globl short_entry\n.type short_entry,@function\n"
    "short_entry:\n"
    "  push %rbx\n"
    "  xor %ebx, %ebx\n"
    "  add %edi, %ebx\n"
    "  mov %ebx, %eax\n"
    "  pop %rbx\n"
    "  ret\n"
    ".size short_entry, .-short_entry\n"
    ".p2align 4\n.globl endbr\n.type endbr,@function\n"
    "endbr:\n"
    "  endbr64\n"
    "  push %rbp\n"
    "  mov %edi, %eax\n"
    "  pop %rbp\n"
    "  ret\n"
    ".size endbr, .-endbr\n"
    ".p2align 4\n.globl tailcaller\n.type tailcaller,@function\n"
    "tailcaller:\n"
    "  add $1, %edi\n"
    "  jmp short_entry\n"
    ".size tailcaller, .-tailcaller\n"
    ".p2align 4\n.globl target_inside\n.type target_inside,@function\n"
    "target_inside:\n"
    "  xor %eax, %eax\n"
    "1:\n"
    "  add $1, %eax\n"
    "  cmp %edi, %eax\n"
    "  jl 1b\n"
    "  ret\n"
    ".size target_inside, .-target_inside\n"
    ".p2align 4\n.globl redzone\n.type redzone,@function\n"
    "redzone:\n"
    "  mov %edi, -8(%rsp)\n"
    "  mov %esi, -16(%rsp)\n"
    "  cmp %esi, %edi\n"
    "  setl %al\n"               /* redzone+10: the flags are live here */
    "  movzbl %al, %eax\n"
    "  add -8(%rsp), %eax\n"
    "  add -16(%rsp), %eax\n"
    "  ret\n"
    ".size redzone, .-redzone\n"
    ".p2align 4\n.globl needs_trap\n.type needs_trap,@function\n"
    "needs_trap:\n"
    "  push %rbx\n"                 /* 1 byte, and the loop head right after it */
    "1:\n"
    "  sub $1, %edi\n"
    "  jg 1b\n"
    "  lea 2f(%rip), %rbx\n"
    "  jmp *%rbx\n"                 /* an indirect jump: no relocating this function */
    "2:\n"
    "  mov %edi, %eax\n"
    "  pop %rbx\n"
    "  ret\n"
    ".size needs_trap, .-needs_trap\n");

TALLY(loophead);
TALLY(loophead_iterations);
TALLY(tiny_padded);
TALLY(tiny_packed);
TALLY(after_tiny);
TALLY(riprel);
TALLY(short_entry);
TALLY(endbr);
TALLY(tailcaller);
TALLY(target_inside);
TALLY(redzone);
TALLY(needs_trap);
TALLY(corrupt);

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 1000);
    long s = 0;
    for (int i = 0; i < n; i++) {
        int k = 1 + i % 7;
        BUMP(loophead);
        atomic_fetch_add(&tally_loophead_iterations, (unsigned long)k);
        if (loophead(k, 0) != k * (k + 1) / 2) BUMP(corrupt);
        BUMP(tiny_padded); tiny_padded();
        BUMP(tiny_packed); s += tiny_packed();
        BUMP(after_tiny); s += after_tiny();
        BUMP(riprel); if (riprel(i) != 40 + i) BUMP(corrupt);
        BUMP(short_entry); if (short_entry(i) != i) BUMP(corrupt);
        BUMP(endbr); if (endbr(i) != i) BUMP(corrupt);
        BUMP(tailcaller); BUMP(short_entry); if (tailcaller(i) != i + 1) BUMP(corrupt);
        BUMP(target_inside); if (target_inside(k) != k) BUMP(corrupt);
        BUMP(redzone); if (redzone(i, 500) != (i < 500) + i + 500) BUMP(corrupt);
        BUMP(needs_trap); if (needs_trap(k) != 0) BUMP(corrupt);
    }
    printf("s %ld\n", s);
    PRINT_TALLY(loophead);
    PRINT_TALLY(loophead_iterations);
    PRINT_TALLY(tiny_padded);
    PRINT_TALLY(tiny_packed);
    PRINT_TALLY(after_tiny);
    PRINT_TALLY(riprel);
    PRINT_TALLY(short_entry);
    PRINT_TALLY(endbr);
    PRINT_TALLY(tailcaller);
    PRINT_TALLY(target_inside);
    PRINT_TALLY(redzone);
    PRINT_TALLY(needs_trap);
    PRINT_TALLY(corrupt);
    return 0;
}
