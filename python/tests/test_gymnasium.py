"""SimEnv as a gymnasium.Env. Gymnasium is not among Debian's packages, so
this test gives the import a minimal stand-in with the two names SimEnv
uses (gymnasium.Env and gymnasium.spaces.Discrete) and checks what SimEnv
does with them: it subclasses Env, seeds it through Env.reset, and sets a
Discrete action space of one action per node."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from tests.helpers import PYTHON_DIR, gpusched_binary, write_trace

STAND_IN = {
    "__init__.py": """
        from . import spaces
        class Env:
            seeded = None
            def reset(self, *, seed=None, options=None):
                Env.seeded = seed
    """,
    "spaces.py": """
        class Discrete:
            def __init__(self, n):
                self.n = n
    """,
}

CHECK = """
import gymnasium
from gpusched_policy.env import SimEnv
assert issubclass(SimEnv, gymnasium.Env)
env = SimEnv(sys.argv[1], sys.argv[2], binary=sys.argv[3])
obs, info = env.reset(seed=9)
assert gymnasium.Env.seeded == 9, gymnasium.Env.seeded
assert isinstance(env.action_space, gymnasium.spaces.Discrete)
assert env.action_space.n == len(env.node_names) == obs["nodes"].shape[0], (env.action_space.n, len(env.node_names))
env.close()
print("ok")
"""


class GymnasiumTest(unittest.TestCase):
    def test_simenv_is_a_gymnasium_env(self):
        with tempfile.TemporaryDirectory() as d:
            pkg = os.path.join(d, "gymnasium")
            os.mkdir(pkg)
            for name, text in STAND_IN.items():
                with open(os.path.join(pkg, name), "w") as f:
                    f.write(textwrap.dedent(text))
            nodes, pods = write_trace(d)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([d, PYTHON_DIR]))
            out = subprocess.run([sys.executable, "-c", "import sys\n" + CHECK, nodes, pods, gpusched_binary()],
                                 env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout.strip(), "ok")


if __name__ == "__main__":
    unittest.main()
