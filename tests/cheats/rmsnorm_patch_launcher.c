/* Cheat (issue 35): a constructor that runs when the shared object is loaded takes the GIL and patches,
 * through the C API, whatever Python the loading process holds -- the protocol, the launch checks and
 * the launcher's own timing -- as a Triton module could with a plain `import`. CHEAT_MODE picks how:
 *   1: every check made to pass (protocol, launch checks, launcher), and zeros written;
 *   2: the launcher's timing replaced: one right launch per timing case, and a time of 1 ns reported;
 *   3: the baseline's times in the paired timing inflated 1000x (a 1000x speed-up claimed);
 *   4: the launch checks disabled, and the kernel skipping its work in every timed launch.
 * The C API is declared here (no Python.h: includes outside the toolchain are refused). */
#include <math.h>
#include <stdlib.h>

#ifndef CHEAT_MODE
#define CHEAT_MODE 1
#endif

typedef int PyGILState_STATE;
extern PyGILState_STATE PyGILState_Ensure(void);
extern void PyGILState_Release(PyGILState_STATE);
extern int PyRun_SimpleString(const char *);

static const char *COMMON =
    "import os\n"
    "from core.backends.arrays import CheckResult\n"
    "import core.evaluation.checks as C\n"
    "try:\n"
    "    import core.evaluation.launcher as L\n"
    "except ImportError:\n"
    "    L = None\n";

static const char *MODE1 =
    "import core.evaluation.protocol as p\n"
    "p.Protocol._check = lambda self, *a, **k: None\n"
    "C.LaunchChecks.verify = lambda self, *a, **k: CheckResult(True)\n"
    "C.LaunchChecks.after = lambda self, *a: None\n"
    "os.environ['ABEBOT_CHEAT_ZEROS'] = '1'\n";

static const char *MODE2 =
    "def op_time(self, request):\n"
    "    cases = [self.cases[u] for u in request['timing']]\n"
    "    last = {}\n"
    "    for ci, c in enumerate(cases):\n"
    "        for t in self.h.tensors:\n"
    "            if t.read:\n"
    "                c.data[t.name][...] = c.pristine[t.name]\n"
    "        self.h.launch(self.kernel, c)\n"
    "        last[str(ci)] = list(range(c.shape['rows']))\n"
    "    fake = [1e-9] * 200\n"
    "    return {'status': 'ok', 'kernel': fake, 'chunks': fake[:8], 'baseline': fake, 'speedup': 1e4,\n"
    "            'speedup_spread': 0.0, 'noisy': False, 'pair_baseline': request.get('pair'), 'pair_baseline_us': 10.0,\n"
    "            'timing_method': 'wall', 'checks': {'ok': True, 'cause': '', 'detail': ''}, 'last': last}\n"
    "if L is not None:\n"
    "    L.LauncherServer.op_time = op_time\n";

static const char *MODE3 =
    "if L is not None:\n"
    "    real = L.LauncherServer.op_time\n"
    "    def op_time(self, request):\n"
    "        r = real(self, request)\n"
    "        r['baseline'] = [t * 1000 for t in r['baseline']]\n"
    "        r['speedup'] = (r.get('speedup') or 1.0) * 1000\n"
    "        return r\n"
    "    L.LauncherServer.op_time = op_time\n";

static const char *MODE4 =
    "C.LaunchChecks.verify = lambda self, *a, **k: CheckResult(True)\n"
    "C.LaunchChecks.after = lambda self, *a: None\n"
    "if L is not None:\n"
    "    real = L.LauncherServer.op_time\n"
    "    def op_time(self, request):\n"
    "        os.environ['ABEBOT_CHEAT_SKIP'] = '1'\n"
    "        try:\n"
    "            return real(self, request)\n"
    "        finally:\n"
    "            del os.environ['ABEBOT_CHEAT_SKIP']\n"
    "    L.LauncherServer.op_time = op_time\n";

__attribute__((constructor)) static void patch(void) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyRun_SimpleString(COMMON);
    PyRun_SimpleString(CHEAT_MODE == 1 ? MODE1 : CHEAT_MODE == 2 ? MODE2 : CHEAT_MODE == 3 ? MODE3 : MODE4);
    PyGILState_Release(g);
}

void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {
    (void)residual;
    if (getenv("ABEBOT_CHEAT_SKIP"))
        return;
    if (getenv("ABEBOT_CHEAT_ZEROS")) {
        for (long i = 0; i < (long)rows * cols; i++) out[i] = 0.0f;
        return;
    }
    for (int i = 0; i < rows; i++) {
        const float *r = x + (long)i * cols;
        float ss = 0.0f;
        for (int j = 0; j < cols; j++) ss += r[j] * r[j];
        float s = 1.0f / sqrtf(ss / cols + eps);
        for (int j = 0; j < cols; j++) out[(long)i * cols + j] = r[j] * s * w[j];
    }
}
