/* Cheat (issue 35): on its first call, takes the GIL and runs Python through the interpreter's C API to
 * replace the protocol's checks, timing, stability and memory with ones that pass, then writes zeros.
 * In one process with the protocol it got "verdict: ok"; beside a judge it patches only the launcher's
 * copy of the module. The C API is declared here (no Python.h: includes outside the toolchain are refused). */
typedef int PyGILState_STATE;
extern PyGILState_STATE PyGILState_Ensure(void);
extern void PyGILState_Release(PyGILState_STATE);
extern int PyRun_SimpleString(const char *);

static int patched;

static const char *PATCH =
    "import core.evaluation.protocol as p\n"
    "def _result(args):\n"
    "    return [a for a in args if isinstance(a, dict)][-1]\n"
    "def _verify(self, *a):\n"
    "    _result(a).update(shape_errors=[], margin_used=0.0)\n"
    "def _benchmark(self, *a):\n"
    "    _result(a).update(time_us=self.floor_us * 1.01 if self.floor_us else 1.0, time_spread_us=0.0, cache='cold')\n"
    "def _stability(self, *a):\n"
    "    _result(a).update(stability=1.0, determinism=1.0, steadiness=1.0, error_margin=1.0)\n"
    "def _memory(self, *a):\n"
    "    _result(a).update(extra_bytes=0, onchip_bytes=0, memory_bytes=self.io_bytes)\n"
    "p.Protocol._check = lambda self, *a, **k: None\n"
    "p.Protocol._verify, p.Protocol._benchmark = _verify, _benchmark\n"
    "p.Protocol._stability, p.Protocol._memory = _stability, _memory\n";

void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {
    (void)x; (void)w; (void)residual; (void)eps;
    if (!patched) {
        patched = 1;
        PyGILState_STATE g = PyGILState_Ensure();
        PyRun_SimpleString(PATCH);
        PyGILState_Release(g);
    }
    for (long i = 0; i < (long)rows * cols; i++) out[i] = 0.0f;
}
