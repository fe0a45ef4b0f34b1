"""tests/scripts/script_case.py: what the tests of the developer scripts
share: the script run as a subprocess on a CSV the test writes, plain and
gzipped, to a temporary folder for the test class."""
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

SRC = os.environ.get("INFERD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def script(name):
    """The path of scripts/NAME in the source tree."""
    return os.path.join(SRC, "scripts", name)


class CsvScriptCase(unittest.TestCase):
    """A subclass sets SCRIPT (a path) and csv_text (a static method
    returning the CSV); its tests read self.plain and self.gz and call
    self.run_script(*args)."""
    SCRIPT = None
    NAME = "data.csv"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.plain = os.path.join(cls.tmp.name, cls.NAME)
        cls.gz = cls.plain + ".gz"
        text = cls.csv_text()
        with open(cls.plain, "w") as f:
            f.write(text)
        with gzip.open(cls.gz, "wt") as f:
            f.write(text)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_script(self, *args):
        return subprocess.run([sys.executable, self.SCRIPT, *args], capture_output=True, text=True)
