// sampler_harness.cpp - applies llama.cpp's samplers (llama.h API, linked against llama.cpp's
// src/llama-sampler.cpp built outside this repository) to fixed logit rows and prints the
// distribution its `dist` sampler would draw from, for tests/fixtures/samplers/ (see the README
// there for the build and the command line).  Our own code: it only calls llama.cpp's API.
//
// Input (stdin), one case per block:
//   case NAME
//   params key=value ...   (temp top_k top_p min_p typ_p top_n_sigma xtc_probability
//                           xtc_threshold dynatemp_range dynatemp_exponent min_keep)
//   logits l0 l1 ...
// The chain is common/sampling.cpp's default order, minus penalties and DRY:
//   top_n_sigma -> top_k -> typ_p -> top_p -> min_p -> xtc -> temperature (temp_ext)
// Output: the input block, then
//   probs id:p id:p ...    (the candidates left with p > 0, by id; p = softmax of their logits,
//                           as llama.cpp's dist sampler computes it)
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

static void run(const std::string & name, const std::string & params_line, const std::vector<float> & logits) {
    std::map<std::string, float> p = {
        {"temp", 0.8f}, {"top_k", 40}, {"top_p", 0.95f}, {"min_p", 0.05f}, {"typ_p", 1.0f},
        {"top_n_sigma", -1.0f}, {"xtc_probability", 0.0f}, {"xtc_threshold", 0.1f},
        {"dynatemp_range", 0.0f}, {"dynatemp_exponent", 1.0f}, {"min_keep", 0},
    };
    std::istringstream ps(params_line);
    std::string kv;
    ps >> kv; // "params"
    while (ps >> kv) {
        const size_t eq = kv.find('=');
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
    llama_sampler_chain_add(chain, llama_sampler_init_top_n_sigma(p["top_n_sigma"]));
    llama_sampler_chain_add(chain, llama_sampler_init_top_k((int32_t) p["top_k"]));
    llama_sampler_chain_add(chain, llama_sampler_init_typical(p["typ_p"], min_keep));
    llama_sampler_chain_add(chain, llama_sampler_init_top_p(p["top_p"], min_keep));
    llama_sampler_chain_add(chain, llama_sampler_init_min_p(p["min_p"], min_keep));
    llama_sampler_chain_add(chain, llama_sampler_init_xtc(p["xtc_probability"], p["xtc_threshold"], min_keep, 1234));
    llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(p["temp"], p["dynatemp_range"], p["dynatemp_exponent"]));

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
    printf("case %s\n%s\nlogits", name.c_str(), params_line.c_str());
    for (float l : logits) printf(" %.9g", l);
    printf("\nprobs");
    for (auto & e : out) printf(" %d:%.9g", e.first, e.second);
    printf("\n\n");
    llama_sampler_free(chain);
}

int main() {
    std::string line, name, params;
    while (std::getline(std::cin, line)) {
        if (line.rfind("case ", 0) == 0) name = line.substr(5);
        else if (line.rfind("params", 0) == 0) params = line;
        else if (line.rfind("logits", 0) == 0) {
            std::istringstream ls(line.substr(6));
            std::vector<float> l;
            float v;
            while (ls >> v) l.push_back(v);
            run(name, params, l);
        }
    }
    return 0;
}
