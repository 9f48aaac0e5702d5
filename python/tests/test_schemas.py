"""The package's schema copies cannot drift from the repository's schemas/*.avsc."""

import os
import subprocess
import unittest

from creditflow import wire

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REPO_SCHEMAS = os.path.join(REPO, "schemas")


def git_show(rev, path):
    try:
        return subprocess.run(["git", "-C", REPO, "show", "%s:%s" % (rev, path)], capture_output=True,
                              check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None


class Drift(unittest.TestCase):
    @unittest.skipUnless(os.path.isdir(REPO_SCHEMAS), "not run from a repository checkout")
    def test_current_copies_equal_the_repository(self):
        if not os.path.exists(os.path.join(REPO_SCHEMAS, "policy.avsc")):
            self.skipTest("schemas/policy.avsc is not in this checkout yet (the stages' side of policy versions)")
        for name, fn in wire._FILES.items():
            with open(os.path.join(REPO_SCHEMAS, fn), encoding="utf-8") as f:
                self.assertEqual(wire.schema_text(name), f.read(), "python/creditflow/schemas/%s differs from schemas/%s; "
                                 "copy it over" % (fn, fn))

    def test_legacy_copies_equal_the_repositorys_v1_folder(self):
        d = os.path.join(REPO_SCHEMAS, "v1")
        if not os.path.isdir(d):
            self.skipTest("schemas/v1 is not in this checkout yet")
        for fn in os.listdir(d):
            if fn.endswith(".avsc"):
                with open(os.path.join(d, fn), encoding="utf-8") as f:
                    name = [k for k, v in wire._FILES.items() if v == fn][0]
                    self.assertEqual(wire.schema_text(name, wire.LEGACY), f.read(), fn)

    def test_later_copies_equal_the_repositorys_folders(self):
        for name, gens in wire.LATER.items():
            for i, gen in enumerate(gens):
                path = os.path.join(REPO_SCHEMAS, "v%d" % (i + 2), wire._FILES[name])
                if not os.path.exists(path):
                    self.skipTest("%s is not in this checkout" % path)
                with open(path, encoding="utf-8") as f:
                    self.assertEqual(wire.schema_text(name, gen), f.read(), path)
                old = git_show(gen, "schemas/" + wire._FILES[name])
                if old is not None:
                    self.assertEqual(wire.schema_text(name, gen), old, "%s of release %s" % (name, gen))

    def test_legacy_copies_equal_release_aeddc48(self):
        for name, fn in wire._FILES.items():
            if name == "PolicyAnnouncement":
                continue
            old = git_show(wire.LEGACY, "schemas/" + fn)
            if old is None:
                self.skipTest("git history with commit %s not available" % wire.LEGACY)
            self.assertEqual(wire.schema_text(name, wire.LEGACY), old, fn)


if __name__ == "__main__":
    unittest.main()
