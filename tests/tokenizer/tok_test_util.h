/* tests/tokenizer/tok_test_util.h: helpers shared by the tokenizer suites:
 * loading fixture tokenizers and the golden files, comparing id arrays. */
#ifndef INFERD_TESTS_TOK_TEST_UTIL_H
#define INFERD_TESTS_TOK_TEST_UTIL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* The fixture tokenizers under test. golden_key names the entry in
 * golden/tokenizers.json (llama3-nobos uses llama3's ids minus BOS). */
typedef struct {
    const char *name;
    const char *dir;        /* relative to the fixtures directory */
    const char *golden_key;
    bool drop_bos;          /* golden ids carry a BOS this tokenizer omits */
} tok_fixture;

extern const tok_fixture k_tok_fixtures[];
extern const int k_n_tok_fixtures;

/* Load a fixture tokenizer (skips the test binary when fixtures are absent;
 * fails the test when loading fails). */
tokenizer *tt_load(const tok_fixture *f);
/* Parse a fixture JSON file (skips when absent). cJSON_Delete it. */
cJSON *tt_load_json(const char *rel);
/* Ids of a JSON array into *out (heap). Returns the count. */
int tt_ids(const cJSON *arr, int32_t **out);
/* "[1, 2, 3]" into buf for messages. */
const char *tt_fmt_ids(const int32_t *ids, int n, char *buf, size_t cap);
/* Encode text and compare with want; returns true when equal and prints a
 * diff when not. */
bool tt_encode_eq(const tokenizer *t, const char *text, bool parse_special, const int32_t *want, int n_want,
                  const char *what);

#endif
