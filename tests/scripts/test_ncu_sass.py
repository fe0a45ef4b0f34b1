#!/usr/bin/env python3
"""tests/scripts/test_ncu_sass.py: scripts/ncu_sass.py on a synthetic ncu source CSV.

Eight SASS rows written as `ncu --page source --csv --print-source sass`
writes them (the kernel-name line, the header, quoted fields, thousands
separators, issued and not-issued stall columns), plain and gzipped: a
prologue run once a warp, a never-executed row, a loop body, and a last
row executed as often as the prologue but not next to it. Checks the
totals, the regions (runs of one executed count, only consecutive rows
merged, the never-executed row skipped), their shares and reasons, the
"other" row under --min-share, the top list (by samples, ties by address
order) and --top 0; a file without the per-instruction columns and a
negative --top fail with a message and a non-zero exit."""
import os
import unittest

import script_case

REASONS = ["long_sb", "wait", "barrier"]
HEAD = (["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
         "# Samples", "Instructions Executed", "Thread Instructions Executed"] + ["stall_" + r for r in REASONS] +
        ["stall_" + r + " (Not Issued)" for r in REASONS])

# (SASS, executed, {reason: samples})
ROWS = [
    ("LDG.E R2, [R4]", 2048, {"long_sb": 3}),             # prologue, once a warp
    ("IMAD.U32 R3, R2, 0x10000, RZ", 2048, {"long_sb": 40, "wait": 2}),
    ("BRA 0x100", 0, {}),                                  # never executed: no region
    ("HMMA.16816.F32 R8, R12, R16, R8", 8192, {"wait": 20}),  # loop body
    ("FMNMX R5, R6, R7, !PT", 8192, {"wait": 5, "long_sb": 1}),
    ("SHFL.BFLY PT, R9, R5, 0x4, 0x1f", 8192, {"wait": 6}),
    ("BAR.SYNC 0x0", 2048, {"barrier": 12}),               # epilogue: once a warp, a region of its own
    ("EXIT", 2048, {"wait": 1}),
]


def csv_text():
    q = lambda fields: ",".join('"%s"' % f for f in fields)
    lines = [q(["Kernel Name", "void attn_kernel<(int)4>(args)"]), q(HEAD)]
    for i, (sass, ex, rs) in enumerate(ROWS):
        n = sum(rs.values())
        lines.append(q([f"0x{0x7f00 + 16 * i:x}", "      " + sass, str(n), str(n), str(n), f"{ex:,}",
                        f"{32 * ex:,}"] + [str(rs.get(r, 0)) for r in REASONS] + [str(rs.get(r, 0)) for r in REASONS]))
    return "\n".join(lines) + "\n"



def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


class NcuSass(script_case.CsvScriptCase):
    SCRIPT = script_case.script("ncu_sass.py")
    NAME = "sass.csv"
    csv_text = staticmethod(csv_text)

    def out(self, *args):
        r = self.run_script(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.splitlines()

    def tables(self, *args):
        """(region rows, top rows) as lists of cells."""
        lines = self.out(*args)
        blocks, cur = [], []
        for l in lines:
            if l.startswith("|"):
                cur.append(l)
            elif cur:
                blocks.append(cur)
                cur = []
        if cur:
            blocks.append(cur)
        return [[cells(l) for l in b[2:]] for b in blocks]

    def test_totals_and_regions(self):
        for path in (self.plain, self.gz):
            lines = self.out(path)
            self.assertEqual(lines[0], "kernel: void attn_kernel<(int)4>(args)")
            self.assertEqual(lines[1], "8 SASS instructions, 32,768 executed, 90 stall samples")
            regions = self.tables(path)[0]
            self.assertEqual([r[:3] for r in regions],
                             [["0..1", "2,048", "4,096"], ["3..5", "8,192", "24,576"], ["6..7", "2,048", "4,096"]])
            self.assertEqual(regions[0][3:6], ["12.5%", "45", "50.0%"])
            self.assertEqual(regions[0][6], "long_sb 43, wait 2")
            self.assertEqual(regions[1][3:7], ["75.0%", "32", "35.6%", "wait 31, long_sb 1"])
            self.assertEqual(regions[2][4:7], ["13", "14.4%", "barrier 12, wait 1"])

    def test_other_row(self):
        regions = self.tables(self.plain, "--min-share", "40")[0]
        self.assertEqual([r[0] for r in regions], ["0..1", "3..5", "other (1)"])
        self.assertEqual(regions[2][2:6], ["4,096", "12.5%", "13", "14.4%"])

    def test_top(self):
        top = self.tables(self.plain, "--top", "5")[1]
        self.assertEqual([(r[0], r[2]) for r in top], [("1", "42"), ("3", "20"), ("6", "12"), ("4", "6"), ("5", "6")])
        self.assertEqual(top[0][4], "IMAD.U32 R3, R2, 0x10000, RZ")
        self.assertEqual(top[0][5], "long_sb 40, wait 2")
        self.assertEqual(len(self.tables(self.plain, "--top", "0")), 1)

    def test_errors(self):
        bad = os.path.join(self.tmp.name, "bad.csv")
        with open(bad, "w") as f:
            f.write('"ID","Kernel Name"\n"1","k"\n')
        for args, msg in [((bad,), "not ncu's per-instruction CSV"),
                          ((self.plain, "--top", "-1"), "must not be negative")]:
            r = self.run_script(*args)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(msg, r.stderr, args)


if __name__ == "__main__":
    unittest.main(verbosity=2)
