// bench_train: single-rank training of a GPT on the Markov data, the reference every chapter
// is checked against. Prints the data's loss floor, the loss as it falls, and how fast the
// CPU trains. A benchmark, not a test.
//
//   cmake --build --preset default --target bench_train
//   build/tests/bench_train --steps 600                  # tiny: reaches ~1.03x the floor
//   build/tests/bench_train --model gpt2-small --steps 1 --global-batch 1 --seq-len 128
#include <chrono>
#include <cstdio>
#include <iostream>

#include "model/data.h"
#include "model/model.h"
#include "run/train_flags.h"

using namespace shardlab;

int main(int argc, char** argv) {
  TrainFlags t;
  int64_t steps = 200, seed = 1234;
  Flags flags("bench_train");
  add_train_flags(flags, t);
  flags.add_int("steps", &steps, 1, 1000000, "training steps");
  flags.add_int("seed", &seed, 0, INT64_MAX, "random seed");
  try {
    if (!flags.parse(argc, argv)) {
      std::cout << flags.usage();
      return 0;
    }
    const TrainSetup setup = train_setup(t, steps, seed);
    const GPTConfig cfg = GPTConfig::preset(setup.model);
    std::printf("model %s: %lld parameters; data: Markov chain over %lld tokens, fanout %d\n", cfg.name.c_str(),
                static_cast<long long>(gpt_num_params(cfg)), static_cast<long long>(cfg.vocab), setup.fanout);
    const auto t0 = std::chrono::steady_clock::now();
    const ReferenceRun run = train_reference(setup);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("loss floor (the chain's entropy rate): %.4f nats per token\n", run.loss_floor);
    for (size_t i = 0; i < run.losses.size(); ++i)
      if (i % 50 == 0 || i + 1 == run.losses.size())
        std::printf("step %5zu  loss %.4f  (%.3fx the floor)\n", i, run.losses[i], run.losses[i] / run.loss_floor);
    const double tokens = static_cast<double>(setup.global_batch * setup.T * steps);
    std::printf("%.1f ms per step, %.0f tokens/s, %.2f GFLOP/s (one CPU core)\n", seconds * 1e3 / static_cast<double>(steps),
                tokens / seconds, gpt_step_flops(cfg, setup.global_batch * setup.T, setup.T) * static_cast<double>(steps) / seconds / 1e9);
  } catch (const std::exception& e) {
    std::cerr << "bench_train: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
