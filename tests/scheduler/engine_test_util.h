/* tests/scheduler/engine_test_util.h: what the engine suites on stories260K
 * share: loading the model on the backend the run asks for
 * (INFERD_TEST_DEVICE=cuda: the GPU), with a KV cache of an exact block
 * count when a test needs one; making an engine over it and checking, at the
 * end, that it went idle with every block free. */
#ifndef INFERD_TESTS_ENGINE_TEST_UTIL_H
#define INFERD_TESTS_ENGINE_TEST_UTIL_H

#include "model/model.h"
#include "scheduler/engine.h"

/* stories260K with max_seqs sequences and max_tokens tokens per step, one
 * CPU thread; kv_blocks > 0: exactly that many KV blocks (learned from a
 * probe load), else the backend's default sizing. Skips the test when the
 * fixture is absent; fails it when loading fails. */
model *etu_load_stories(int max_seqs, int max_tokens, int kv_blocks);
/* Exit 77 (skip) when INFERD_TEST_DEVICE=cuda finds no GPU, or asks for
 * more tensor-parallel ranks (INFERD_TEST_TP) than this machine has GPUs;
 * call from main. A child process counts the GPUs, so the parent never
 * initializes CUDA and Check's forked tests can use it. */
void etu_require_tp_devices(void);

/* An engine over m (tok may be NULL) with these step limits, started. */
engine *etu_make_engine(model *m, const tokenizer *tok, int max_seqs, int max_tokens, bool caching);
/* The same with async scheduling on or off (etu_make_engine: the default). */
engine *etu_make_engine_async(model *m, const tokenizer *tok, int max_seqs, int max_tokens, bool caching,
                              bool async);

/* Wait until idle; check the invariants, every KV block free and nothing
 * running or waiting; the final stats to *out when not NULL; free e. */
void etu_finish_engine(engine *e, engine_stats *out);

#endif
