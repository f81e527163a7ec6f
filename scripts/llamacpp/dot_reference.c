// ggml's own quantised dot products and activation quantisers on random blocks: the
// reference of crates/rkv-kernels/tests/ggml_dots.rs (scripts/llamacpp/dot_reference.sh
// builds and runs this against a llama.cpp build's libggml).
//
// Every case is drawn from splitmix64 seeded by the case number, in an order the Rust
// test repeats: the weight row (random bytes with sane f16 scales; Q8_0 weights are ggml's
// quantisation of random floats), then the activations (random floats, one of them
// scaled by 64 in every third case), quantised by ggml's `from_float` of the weight type's
// `vec_dot_type`. Printed per case: type, blocks, seed, FNV-1a of the weight and of the
// quantised activation bytes, and the bits of ggml's `vec_dot` result.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A float in [-2, 2) with 23 significant bits: exact in any language.
static float gen_float(uint64_t *s) {
    return (float)((int32_t)(next(s) >> 40) - (1 << 23)) * 0x1p-22f;
}

// A normal f16 of magnitude 2^-6 .. 2^2, either sign.
static uint16_t gen_f16(uint64_t *s) {
    uint64_t r = next(s);
    return (uint16_t)(((r >> 63) << 15) | ((9 + ((r >> 56) & 7)) << 10) | (r & 0x3ff));
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

struct format {
    enum ggml_type type;
    int f16_offsets[2]; // byte offsets of the block's f16 scales; -1 for none
    int blocks[6];      // blocks per row of the cases; 0 ends the list
};

int main(void) {
    ggml_cpu_init();
    const struct format formats[] = {
        {GGML_TYPE_Q4_0, {0, -1}, {1, 2, 3, 8, 17, 64}},
        {GGML_TYPE_Q4_1, {0, 2}, {1, 2, 3, 8, 17, 64}},
        {GGML_TYPE_Q5_0, {0, -1}, {1, 2, 3, 8, 17, 64}},
        {GGML_TYPE_Q5_1, {0, 2}, {1, 2, 3, 8, 17, 64}},
        {GGML_TYPE_Q8_0, {-1, -1}, {1, 2, 3, 8, 17, 64}},
        {GGML_TYPE_Q4_K, {0, 2}, {1, 2, 3, 8, 24}},
        {GGML_TYPE_Q5_K, {0, 2}, {1, 2, 3, 8, 24}},
        {GGML_TYPE_Q6_K, {208, -1}, {1, 2, 3, 8, 24}},
    };
    const int per_shape = 12;
    uint64_t seed = 0;
    printf("# type blocks seed weight_fnv1a activation_fnv1a dot_bits\n");
    for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
        const struct format *fm = &formats[f];
        const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu(fm->type);
        const struct ggml_type_traits_cpu *act_tr = ggml_get_type_traits_cpu(tr->vec_dot_type);
        const size_t bsize = ggml_type_size(fm->type);
        const int64_t bl = ggml_blck_size(fm->type);
        for (int b = 0; b < 6 && fm->blocks[b] > 0; b++) {
            const int nb = fm->blocks[b];
            const int64_t n = nb * bl;
            for (int c = 0; c < per_shape; c++, seed++) {
                uint64_t s = seed;
                uint8_t *w = malloc(nb * bsize);
                float *x = malloc(n * sizeof(float));
                if (fm->type == GGML_TYPE_Q8_0) {
                    for (int64_t i = 0; i < n; i++) x[i] = gen_float(&s);
                    tr->from_float(x, w, n);
                } else {
                    for (size_t i = 0; i < nb * bsize; i++) w[i] = (uint8_t)(next(&s) >> 56);
                    for (int i = 0; i < nb; i++) {
                        for (int k = 0; k < 2 && fm->f16_offsets[k] >= 0; k++) {
                            uint16_t h = gen_f16(&s);
                            memcpy(w + i * bsize + fm->f16_offsets[k], &h, 2);
                        }
                    }
                }
                for (int64_t i = 0; i < n; i++) x[i] = gen_float(&s);
                if (seed % 3 == 1) x[next(&s) % (uint64_t)n] *= 64.0f;
                const size_t asize = ggml_row_size(tr->vec_dot_type, n);
                uint8_t *a = malloc(asize);
                act_tr->from_float(x, a, n);
                float dot = 0;
                tr->vec_dot((int)n, &dot, 0, w, 0, a, 0, 1);
                uint32_t bits;
                memcpy(&bits, &dot, 4);
                printf("%s %d %llu %016llx %016llx %08x\n", ggml_type_name(fm->type), nb,
                       (unsigned long long)seed, (unsigned long long)fnv1a(w, nb * bsize),
                       (unsigned long long)fnv1a(a, asize), bits);
                free(w);
                free(x);
                free(a);
            }
        }
    }
    return 0;
}
