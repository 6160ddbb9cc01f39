// sampler_harness.cpp - applies llama.cpp's samplers (llama.h API, linked against llama.cpp's
// src/llama-sampler.cpp built outside this repository) to fixed logit rows and prints the
// distribution its `dist` sampler would draw from, for tests/fixtures/samplers/ (see the README
// there for the build and the command line).  Our own code: it only calls llama.cpp's API.
//
// Input (stdin), one case per block:
//   case NAME
//   params key=value ...   (temp top_k top_p min_p typ_p top_n_sigma xtc_probability
//                           xtc_threshold dynatemp_range dynatemp_exponent min_keep)
//   [history t0 t1 ...]     (tokens accepted before, oldest first: DRY's window)
//   [breakers a,b c ...]    (DRY sequence breakers as token sequences, each comma-separated)
//   logits l0 l1 ...
// The chain is common/sampling.cpp's default order, minus the penalties:
//   DRY (when dry_multiplier != 0; dry_penalty_last_n -1 = the history's length, as common/ maps
//   it to the context size) -> top_n_sigma -> top_k -> typ_p -> top_p -> min_p -> xtc -> temperature (temp_ext)
// Output: the input block, then
//   probs id:p id:p ...    (the candidates left with p > 0, by id; p = softmax of their logits,
//                           as llama.cpp's dist sampler computes it)
#include "llama.h"
#include "llama-sampler.h" // llama_sampler_init_dry_testing: DRY with breakers given as token sequences

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

// llama_sampler_init_dry_testing builds a llama_vocab it never reads: a do-nothing constructor
// and destructor stand in for llama-vocab.cpp's (not linked).
extern "C" void _ZN11llama_vocabC1Ev(void *) {}
extern "C" void _ZN11llama_vocabD1Ev(void *) {}

static void run(const std::string & name, const std::string & params_line, const std::vector<float> & logits,
                const std::vector<llama_token> & history, const std::vector<std::vector<llama_token>> & breakers) {
    std::map<std::string, float> p = {
        {"temp", 0.8f}, {"top_k", 40}, {"top_p", 0.95f}, {"min_p", 0.05f}, {"typ_p", 1.0f},
        {"top_n_sigma", -1.0f}, {"xtc_probability", 0.0f}, {"xtc_threshold", 0.1f},
        {"dynatemp_range", 0.0f}, {"dynatemp_exponent", 1.0f}, {"min_keep", 0},
        {"penalty_last_n", 64}, {"repeat_penalty", 1.0f}, {"frequency_penalty", 0.0f}, {"presence_penalty", 0.0f},
        {"dry_multiplier", 0.0f}, {"dry_base", 1.75f}, {"dry_allowed_length", 2}, {"dry_penalty_last_n", -1},
    };
    std::istringstream ps(params_line);
    std::string kv, order;
    ps >> kv; // "params"
    while (ps >> kv) {
        const size_t eq = kv.find('=');
        if (kv.rfind("order=", 0) == 0) {
            order = kv.substr(6);
            continue;
        }
        if (eq == std::string::npos || !p.count(kv.substr(0, eq))) {
            fprintf(stderr, "bad param '%s'\n", kv.c_str());
            exit(2);
        }
        p[kv.substr(0, eq)] = std::stof(kv.substr(eq + 1));
    }
    const size_t min_keep = (size_t) p["min_keep"];
    llama_sampler_chain_params cp;
    cp.no_perf = true; // (llama_sampler_chain_default_params lives outside llama-sampler.cpp)
    llama_sampler * chain = llama_sampler_chain_init(cp);
    const int32_t dry_last_n = p["dry_penalty_last_n"] < 0 ? (int32_t) history.size() : (int32_t) p["dry_penalty_last_n"];
    // order= (llama.cpp's sampler letters): that chain, as common_sampler_init builds it; else the
    // default order without the penalties (DRY only when dry_multiplier != 0)
    const std::string seq = order.empty() ? (p["dry_multiplier"] != 0.0f ? "dskypmxt" : "skypmxt") : order;
    for (char c : seq) {
        switch (c) {
            case 'e': llama_sampler_chain_add(chain, llama_sampler_init_penalties((int32_t) logits.size(), (int32_t) p["penalty_last_n"], p["repeat_penalty"],
                                                                                  p["frequency_penalty"], p["presence_penalty"])); break;
            case 'd': llama_sampler_chain_add(chain, llama_sampler_init_dry_testing(p["dry_multiplier"], p["dry_base"],
                                                                                    (int32_t) p["dry_allowed_length"], dry_last_n, breakers)); break;
            case 's': llama_sampler_chain_add(chain, llama_sampler_init_top_n_sigma(p["top_n_sigma"])); break;
            case 'k': llama_sampler_chain_add(chain, llama_sampler_init_top_k((int32_t) p["top_k"])); break;
            case 'y': llama_sampler_chain_add(chain, llama_sampler_init_typical(p["typ_p"], min_keep)); break;
            case 'p': llama_sampler_chain_add(chain, llama_sampler_init_top_p(p["top_p"], min_keep)); break;
            case 'm': llama_sampler_chain_add(chain, llama_sampler_init_min_p(p["min_p"], min_keep)); break;
            case 'x': llama_sampler_chain_add(chain, llama_sampler_init_xtc(p["xtc_probability"], p["xtc_threshold"], min_keep, 1234)); break;
            case 't': llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(p["temp"], p["dynatemp_range"], p["dynatemp_exponent"])); break;
            default: fprintf(stderr, "bad sampler letter '%c'\n", c); exit(2);
        }
    }
    for (llama_token t : history) llama_sampler_accept(chain, t);
    std::vector<llama_token_data> cand;
    for (size_t i = 0; i < logits.size(); i++) cand.push_back({(llama_token) i, logits[i], 0.0f});
    llama_token_data_array arr = {cand.data(), cand.size(), -1, false};
    llama_sampler_apply(chain, &arr);

    // the dist sampler's softmax over what is left
    float mx = -INFINITY;
    for (size_t i = 0; i < arr.size; i++) mx = std::max(mx, arr.data[i].logit);
    double sum = 0.0;
    for (size_t i = 0; i < arr.size; i++) sum += std::exp((double) arr.data[i].logit - mx);
    std::map<int, double> out;
    for (size_t i = 0; i < arr.size; i++) {
        const double q = std::exp((double) arr.data[i].logit - mx) / sum;
        if (q > 0.0) out[arr.data[i].id] = q;
    }
    printf("case %s\n%s\n", name.c_str(), params_line.c_str());
    if (!history.empty()) {
        printf("history");
        for (llama_token t : history) printf(" %d", t);
        printf("\n");
    }
    if (!breakers.empty()) {
        printf("breakers");
        for (auto & b : breakers)
            for (size_t i = 0; i < b.size(); i++) printf("%s%d", i ? "," : " ", b[i]);
        printf("\n");
    }
    printf("logits");
    for (float l : logits) printf(" %.9g", l);
    printf("\nprobs");
    for (auto & e : out) printf(" %d:%.9g", e.first, e.second);
    printf("\n\n");
    llama_sampler_free(chain);
}

int main() {
    std::string line, name, params;
    std::vector<llama_token> history;
    std::vector<std::vector<llama_token>> breakers;
    while (std::getline(std::cin, line)) {
        if (line.rfind("case ", 0) == 0) {
            name = line.substr(5);
            history.clear();
            breakers.clear();
        } else if (line.rfind("params", 0) == 0) params = line;
        else if (line.rfind("history", 0) == 0) {
            std::istringstream hs(line.substr(7));
            llama_token t;
            while (hs >> t) history.push_back(t);
        } else if (line.rfind("breakers", 0) == 0) {
            std::istringstream bs(line.substr(8));
            std::string w;
            while (bs >> w) {
                std::vector<llama_token> b;
                std::istringstream ws(w);
                std::string t;
                while (std::getline(ws, t, ',')) b.push_back(std::stoi(t));
                breakers.push_back(b);
            }
        }
        else if (line.rfind("logits", 0) == 0) {
            std::istringstream ls(line.substr(6));
            std::vector<float> l;
            float v;
            while (ls >> v) l.push_back(v);
            run(name, params, l, history, breakers);
        }
    }
    return 0;
}
