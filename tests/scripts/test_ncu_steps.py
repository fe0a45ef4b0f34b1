#!/usr/bin/env python3
"""tests/scripts/test_ncu_steps.py: scripts/ncu_steps.py on synthetic ncu CSVs.

A run of a warm-up step (prefill attention), two decode steps of 2
sequences and one of 1, written as ncu's --csv output (its '==' notes, a
header, quoted fields, thousands separators), plain and gzipped: the table
shows the last decode step of the asked batch, grouped and ordered by time;
a batch with no pure decode step, a file that is not ncu's CSV and a batch
below 1 fail with a message and a non-zero exit."""
import os
import unittest

import script_case

HEAD = ['ID', 'Process ID', 'Process Name', 'Host Name', 'Kernel Name', 'Context', 'Stream', 'Block Size',
        'Grid Size', 'Device', 'CC', 'Section Name', 'Metric Name', 'Metric Value']

# (kernel name, grid, ns)
KERNELS = [
    ("void attn_prefill_tc_kernel<128>(args)", "(4, 8, 1)", 90000),   # warm-up: a prefill step
    ("sample_kernel(args)", "(2, 1, 1)", 20000),
    ("void gemv_tc_kernel<1, 0>(gemv_args)", "(384, 1, 1)", 18000),    # decode step 1 (2 rows)
    ("attn_decode_kernel(kc_attn_args)", "(2, 8, 4)", 9000),
    ("void gemv_tc_kernel<1, 0>(gemv_args)", "(384, 1, 1)", 1000000),
    ("sample_kernel(args)", "(2, 1, 1)", 20000),
    ("void gemv_tc_kernel<1, 0>(gemv_args)", "(384, 1, 1)", 17000),    # decode step 2 (2 rows): shown
    ("attn_decode_kernel(kc_attn_args)", "(2, 8, 4)", 8000),
    ("void gemv_tc_kernel<1, 0>(gemv_args)", "(384, 1, 1)", 19000),
    ("void add_rmsnorm_kernel<1>(add_rmsnorm_args)", "(2, 1, 1)", 3000),
    ("sample_kernel(args)", "(2, 1, 1)", 2000),
    ("void gemv_kernel<1>(gemv_args)", "(512, 1, 1)", 12000),          # decode step 3 (1 row)
    ("sample_kernel(args)", "(1, 1, 1)", 2000),
]


def csv_text():
    q = lambda fields: ",".join('"%s"' % f for f in fields)
    lines = ["==WARNING== Note: Running with uncontrolled GPU caches.", q(HEAD)]
    for i, (name, grid, ns) in enumerate(KERNELS):
        lines.append(q([str(i), "1", "inferd", "127.0.0.1", name, "1", "13", "(256, 1, 1)", grid, "0", "9.0",
                        "Command line profiler metrics", "gpu__time_duration.sum", f"{ns:,}"]))
    return "\n".join(lines) + "\n"


class NcuSteps(script_case.CsvScriptCase):
    SCRIPT = script_case.script("ncu_steps.py")
    NAME = "steps.csv"
    csv_text = staticmethod(csv_text)

    def table(self, path, batch, *more):
        r = self.run_script(path, "--batch", str(batch), *more)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.splitlines()

    def test_last_decode_step(self):
        for path in (self.plain, self.gz):
            out = self.table(path, 2)
            self.assertEqual(out[0], "step: kernels 6..10 (5 launches), 49.0 us summed")
            rows = [l for l in out[3:] if l.startswith("| ")]
            # grouped by name and grid, the most time first; parameter lists dropped, templates kept
            self.assertEqual([r.split("|")[1].strip() for r in rows],
                             ["gemv_tc_kernel<1, 0>", "attn_decode_kernel", "add_rmsnorm_kernel<1>", "sample_kernel"])
            gemv = [c.strip() for c in rows[0].split("|")]
            self.assertEqual(gemv[3:7], ["2", "36.0", "18.00", "73.5%"])

    def test_all_steps(self):
        out = self.table(self.plain, 2, "--step", "all")
        self.assertEqual([l for l in out if l.startswith("step:")],
                         ["step: kernels 2..5 (4 launches), 1047.0 us summed",
                          "step: kernels 6..10 (5 launches), 49.0 us summed"])

    def test_one_sequence(self):
        out = self.table(self.plain, 1)
        self.assertEqual(out[0], "step: kernels 11..12 (2 launches), 14.0 us summed")

    def test_errors(self):
        bad = os.path.join(self.tmp.name, "bad.csv")
        with open(bad, "w") as f:
            f.write('"a","b"\n"1","2"\n')
        for args, msg in [((self.plain, "--batch", "3"), "no pure decode step of 3 sequences among 13 kernels"),
                          ((self.plain, "--batch", "0"), "--batch must be at least 1"),
                          ((bad, "--batch", "1"), "not ncu's CSV")]:
            r = self.run_script(*args)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(msg, r.stderr, args)


if __name__ == "__main__":
    unittest.main(verbosity=2)
