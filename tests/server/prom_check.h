/* tests/server/prom_check.h: a strict validator for the Prometheus text
 * exposition format (0.0.4), and a sample lookup, for the metrics tests.
 */
#ifndef INFERD_TESTS_PROM_CHECK_H
#define INFERD_TESTS_PROM_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Validate the whole exposition. On failure returns false and writes the
 * first problem (with its line number) to err. Checks: line syntax (names,
 * labels, escapes, float values, optional timestamps), HELP/TYPE at most once
 * per family and TYPE before its samples, families contiguous, no duplicate
 * series, counters >= 0, and for histograms per label set: le ascending,
 * cumulative counts non-decreasing, a +Inf bucket equal to _count, and _sum. */
bool prom_validate(const char *text, char *err, size_t err_len);

/* Value of the sample whose name (and label set, written exactly as in the
 * exposition, e.g. `inferd:http_requests_total{code="200"}`) matches;
 * false when absent. */
bool prom_value(const char *text, const char *series, double *out);

#endif
