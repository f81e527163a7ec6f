// Greedy continuations and top-2 margins from llama.cpp, for rkv's parity tests on files
// llama.cpp runs (scripts/llamacpp/requant_reference.sh builds and drives it).
//
// Usage: greedy MODEL.gguf MAX_NEW EOS_ID [LOGITS.bin] < prompts
// Each input line is one prompt's token ids (space-separated); each output line is the
// greedy continuation as "id:margin" pairs, margin = (l1 - l2) / |l1| of llama.cpp's own
// logits at that step. Stops at EOS_ID (included) or after MAX_NEW tokens. A line
// "PROMPT | FORCED" teacher-forces: after each step the next FORCED token is fed instead
// of llama.cpp's own choice (which is still what is printed), for as many steps as
// FORCED has tokens. With LOGITS.bin, every step's whole logit vector is appended to that
// file as little-endian f32 (scripts/llamacpp/logit_noise.sh reads them). Settings as
// shared/reference/README.md: 2 threads, f16 KV cache, flash attention off, one batch
// for the prompt, then one token at a time.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char ** argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf MAX_NEW EOS_ID [LOGITS.bin] < prompts\n", argv[0]);
        return 2;
    }
    const int max_new = atoi(argv[2]);
    const llama_token eos = atoi(argv[3]);
    FILE * dump = nullptr;
    if (argc == 5 && !(dump = fopen(argv[4], "wb"))) {
        fprintf(stderr, "cannot write %s\n", argv[4]);
        return 1;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::string line;
    while (std::getline(std::cin, line)) {
        std::vector<llama_token> prompt, forced;
        const size_t bar = line.find('|');
        std::istringstream in(line.substr(0, bar));
        for (long id; in >> id;) prompt.push_back((llama_token) id);
        if (bar != std::string::npos) {
            std::istringstream rest(line.substr(bar + 1));
            for (long id; rest >> id;) forced.push_back((llama_token) id);
        }
        if (prompt.empty()) continue;
        const int steps = forced.empty() ? max_new : (int) forced.size();
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = prompt.size() + steps + 8;
        cp.n_batch = cp.n_ctx;
        cp.n_ubatch = cp.n_ctx;
        cp.n_threads = 2;
        cp.n_threads_batch = 2;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        cp.type_k = GGML_TYPE_F16;
        cp.type_v = GGML_TYPE_F16;
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            fprintf(stderr, "cannot make a context\n");
            return 1;
        }
        llama_batch batch = llama_batch_get_one(prompt.data(), (int32_t) prompt.size());
        llama_token next = 0;
        for (int step = 0; step < steps; ++step) {
            if (llama_decode(ctx, batch) != 0) {
                fprintf(stderr, "decode failed at step %d\n", step);
                return 1;
            }
            const float * logits = llama_get_logits_ith(ctx, -1);
            int best = 0;
            for (int i = 1; i < n_vocab; ++i) {
                if (logits[i] > logits[best]) best = i;
            }
            float second = -INFINITY;
            for (int i = 0; i < n_vocab; ++i) {
                if (i != best && logits[i] > second) second = logits[i];
            }
            const float margin = (logits[best] - second) / std::fabs(logits[best]);
            if (dump && fwrite(logits, sizeof(float), n_vocab, dump) != (size_t) n_vocab) {
                fprintf(stderr, "cannot write the logits\n");
                return 1;
            }
            printf("%s%d:%.6g", step ? " " : "", best, margin);
            next = forced.empty() ? best : forced[step];
            if (next == eos) break;
            batch = llama_batch_get_one(&next, 1);
        }
        printf("\n");
        fflush(stdout);
        llama_free(ctx);
    }
    llama_model_free(model);
    if (dump && fclose(dump) != 0) {
        fprintf(stderr, "cannot write the logits\n");
        return 1;
    }
    return 0;
}
