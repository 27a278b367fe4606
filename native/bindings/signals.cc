// ring_strategy._native.answer_signals: Python's signals for framework
// kernels that wait on the calling thread (RingEngineApi.signals). A
// TensorFlow eager op runs its kernel on the Python thread and blocks it
// until the kernel calls done(), where no signal handler can run; the front
// end calls the op through answer_signals(fn), and a kernel that sees the
// mark (RING_SIGNALS_ASK) waits for its operations itself, running the
// handlers every 0.1 s (RING_SIGNALS_RUN). When a handler raises, the kernel
// gives up its wait (its operations finish unseen) and answer_signals raises
// the handler's exception (KeyboardInterrupt, a SIGALRM timeout) in place of
// the framework's error, as ring's own waits do (module.cc wait_with_signals).
#include <nanobind/nanobind.h>

#include "frameworks/engine_api.h"
#include "frameworks/engine_calls.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Whether this thread is inside answer_signals().
thread_local bool t_answers_signals = false;

// The exception a handler raised during RING_SIGNALS_RUN, until
// answer_signals() raises it (one at a time: only the main thread runs
// Python's signal handlers). Touched with the GIL held.
PyObject* g_raised_type = nullptr;
PyObject* g_raised_value = nullptr;
PyObject* g_raised_traceback = nullptr;

int32_t python_signals(int32_t what) {
  if (what == RING_SIGNALS_ASK) return t_answers_signals ? 1 : 0;
  if (what != RING_SIGNALS_RUN || !t_answers_signals) return 0;
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return 0;
  if (g_raised_type) {  // a second handler's exception while the first one waits: the first one wins
    PyErr_Clear();
    return 1;
  }
  PyErr_Fetch(&g_raised_type, &g_raised_value, &g_raised_traceback);
  return 1;
}

// Raises the kept exception, if any (GIL held).
void raise_kept() {
  if (!g_raised_type) return;
  PyErr_Restore(g_raised_type, g_raised_value, g_raised_traceback);
  g_raised_type = g_raised_value = g_raised_traceback = nullptr;
  throw nb::python_error();
}

// Marks this thread for the duration of one call (calls nest).
struct Mark {
  bool before = t_answers_signals;
  Mark() { t_answers_signals = true; }
  ~Mark() { t_answers_signals = before; }
};

nb::object answer_signals(nb::callable fn) {
  nb::object result;
  {
    Mark mark;
    try {
      result = fn();
    } catch (nb::python_error&) {
      raise_kept();  // the handler's exception in place of the framework's "interrupted" error
      throw;
    }
  }
  raise_kept();  // a handler raised as the operation finished: its exception still propagates
  return result;
}

}  // namespace

void register_signals(nb::module_& m) {
  ring::set_signals_hook(&python_signals);
  m.def("answer_signals", &answer_signals, "fn"_a,
        "fn(), during which a framework kernel that waits on this thread runs Python's signal handlers; "
        "an exception a handler raised is raised from here (native/bindings/signals.cc).");
}
