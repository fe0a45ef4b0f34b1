/* server/srv_jinja.c: see srv_jinja.h.
 *
 * The environment is written in Python (k_env_py below) and run once in a
 * private namespace of the embedded interpreter; C keeps two callables from
 * it, compile_template() and render(). Variables cross the boundary as one
 * JSON text decoded by json.loads on the Python side: that gives the
 * template exactly the dict/list/str/int/float/bool/None values HF users
 * pass (JSON objects keep their key order), without a hand-written cJSON to
 * PyObject converter. The rendered str comes back as UTF-8.
 *
 * The interpreter is configured isolated (no PYTHON* environment variables,
 * no user site-packages), does not install signal handlers (the server
 * takes SIGINT/SIGTERM with sigtimedwait) and writes no bytecode. Its
 * program name is the interpreter CMake found (INFERD_PYTHON_EXECUTABLE),
 * so it finds the same standard library and dist-packages (python3-jinja2).
 * After start-up the initializing thread releases the GIL; every entry
 * point takes it with PyGILState_Ensure and drops it before returning. The
 * interpreter is never finalized: it lives as long as the process.
 *
 * Trade-off: a real interpreter instead of a C Jinja subset means every HF
 * template renders exactly as in transformers, at the cost of a libpython
 * dependency and of renders serialised by the GIL (a render takes tens to
 * hundreds of microseconds, small next to the prefill it precedes). Not
 * done here: which template to use (srv_chat.c) and tokenizing the result.
 */
#ifdef INFERD_HAVE_JINJA
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first: it sets feature macros */
#endif

#include "server/srv_jinja.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"

#ifdef INFERD_HAVE_JINJA

/* NOTE: compile_template and render catch every exception and return
 * (value, type name, message) so no Python exception escapes to C in the
 * normal failure case (a template that raises, a syntax error); C still
 * handles a pending exception for the abnormal ones (result_error). */
static const char k_env_py[] =
    "import datetime, json\n"
    "import jinja2, jinja2.ext, jinja2.nodes, sys\n"
    "from jinja2.exceptions import TemplateError\n"
    "from jinja2.sandbox import ImmutableSandboxedEnvironment\n"
    "\n"
    "def raise_exception(message):\n"
    "    raise TemplateError(message)\n"
    "\n"
    "def strftime_now(fmt):\n"
    "    return datetime.datetime.now().strftime(fmt)\n"
    "\n"
    "def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):\n"
    "    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,\n"
    "                      sort_keys=sort_keys)\n"
    "\n"
    "class GenerationBlock(jinja2.ext.Extension):\n"
    "    tags = {'generation'}\n"
    "    def parse(self, parser):\n"
    "        lineno = next(parser.stream).lineno\n"
    "        body = parser.parse_statements(('name:endgeneration',), drop_needle=True)\n"
    "        return jinja2.nodes.CallBlock(self.call_method('_render_body'), [], [], body).set_lineno(lineno)\n"
    "    def _render_body(self, caller):\n"
    "        return caller()\n"
    "\n"
    "env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,\n"
    "                                    extensions=[GenerationBlock, jinja2.ext.loopcontrols])\n"
    "env.filters['tojson'] = tojson\n"
    "env.globals['raise_exception'] = raise_exception\n"
    "env.globals['strftime_now'] = strftime_now\n"
    "version = 'jinja2 %s (Python %s)' % (jinja2.__version__, sys.version.split()[0])\n"
    "\n"
    "def compile_template(source):\n"
    "    try:\n"
    "        return (env.from_string(source), None, None)\n"
    "    except Exception as e:\n"
    "        return (None, type(e).__name__, str(e))\n"
    "\n"
    "def iterates_content(source):\n"
    "    try:\n"
    "        tree = env.parse(source)\n"
    "    except Exception:\n"
    "        return False\n"
    "    for loop in tree.find_all(jinja2.nodes.For):\n"
    "        it = loop.iter\n"
    "        if isinstance(it, jinja2.nodes.Getattr) and it.attr == 'content':\n"
    "            return True\n"
    "        if isinstance(it, jinja2.nodes.Getitem) and isinstance(it.arg, jinja2.nodes.Const) \\\n"
    "                and it.arg.value == 'content':\n"
    "            return True\n"
    "    return False\n"
    "\n"
    "def final_message_text(messages):\n"
    "    last = messages[-1] if isinstance(messages, list) and messages else None\n"
    "    text = last.get('content') if isinstance(last, dict) else None\n"
    "    if isinstance(text, list):\n"
    "        parts = [p['text'] for p in text if isinstance(p, dict) and isinstance(p.get('text'), str)]\n"
    "        text = parts[-1] if parts else None\n"
    "    if not isinstance(text, str):\n"
    "        raise ValueError('continue_final_message is set but the final message has no text to continue')\n"
    "    return text\n"
    "\n"
    "def cut_after_final(rendered, messages):\n"
    "    final = final_message_text(messages)\n"
    "    core = final.strip()\n"
    "    at = rendered.rfind(core)\n"
    "    if at < 0:\n"
    "        raise ValueError('continue_final_message is set but the final message does not appear in the chat '\n"
    "                         'after applying the chat template (the template changes or drops it)')\n"
    "    keep = len(final.lstrip())\n"
    "    if rendered[at:at + keep] != final:\n"
    "        keep = len(core)\n"
    "    return rendered[:at + keep]\n"
    "\n"
    "def render(template, variables_json, fixed_now, continue_final):\n"
    "    try:\n"
    "        kw = json.loads(variables_json)\n"
    "        if fixed_now:\n"
    "            now = datetime.datetime.fromisoformat(fixed_now)\n"
    "            kw['strftime_now'] = lambda fmt: now.strftime(fmt)\n"
    "        text = template.render(**kw)\n"
    "        if continue_final:\n"
    "            text = cut_after_final(text, kw.get('messages'))\n"
    "        return (text, None, None)\n"
    "    except Exception as e:\n"
    "        return (None, type(e).__name__, str(e))\n";

struct srv_jinja {
    PyObject *tmpl;     /* jinja2 Template */
    bool content_parts; /* a {% for %} iterates over some `.content` (srv_jinja_iterates_content) */
};

/* Process-wide state, written once by init_once (pthread_once orders those
 * writes before every later reader) and read-only afterwards. */
static struct {
    pthread_once_t once;
    inferd_status status;
    char why[400];
    char version[96];
    PyObject *compile_fn, *render_fn, *content_fn; /* owned references */
} g = {.once = PTHREAD_ONCE_INIT, .status = INFERD_ERR_UNAVAILABLE};

/* Text of the pending Python exception (cleared); GIL held.
 * Formatted as "Type: message" into dst (truncated to cap). The
 * references PyErr_Fetch hands over are dropped here. */
static void take_exception(char *dst, size_t cap)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *txt = s ? PyUnicode_AsUTF8(s) : NULL;
    const char *tn = type ? ((PyTypeObject *)type)->tp_name : "error";
    snprintf(dst, cap, "%s: %s", tn, txt ? txt : "(no message)");
    PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Run k_env_py and keep its callables; GIL held.
 * A fresh dict as the namespace, not __main__'s, so nothing the program
 * embedding us defines can clash. PyDict_GetItemString returns borrowed
 * references, hence the INCREFs for the two callables we keep. */
static bool build_env(void)
{
    PyObject *ns = PyDict_New();
    if (!ns || PyDict_SetItemString(ns, "__builtins__", PyEval_GetBuiltins()) != 0) {
        Py_XDECREF(ns);
        take_exception(g.why, sizeof g.why);
        return false;
    }
    PyObject *r = PyRun_String(k_env_py, Py_file_input, ns, ns);
    if (!r) {
        char ex[300];
        take_exception(ex, sizeof ex);
        snprintf(g.why, sizeof g.why, "the embedded Python could not set up jinja2 (install python3-jinja2): %s",
                 ex);
        Py_DECREF(ns);
        return false;
    }
    Py_DECREF(r);
    g.compile_fn = PyDict_GetItemString(ns, "compile_template");
    g.render_fn = PyDict_GetItemString(ns, "render");
    g.content_fn = PyDict_GetItemString(ns, "iterates_content");
    PyObject *ver = PyDict_GetItemString(ns, "version");
    Py_XINCREF(g.compile_fn);
    Py_XINCREF(g.render_fn);
    Py_XINCREF(g.content_fn);
    const char *v = ver ? PyUnicode_AsUTF8(ver) : NULL;
    snprintf(g.version, sizeof g.version, "%s", v ? v : "jinja2");
    Py_DECREF(ns); /* the functions keep their globals alive */
    return g.compile_fn && g.render_fn && g.content_fn;
}

/* Runs once per process, on whichever thread first needs Jinja (srv_run's
 * main thread in the server). On failure g.status stays UNAVAILABLE and
 * g.why says why; it is never retried (a missing jinja2 will not appear).
 * site_import stays on so dist-packages (where Debian puts jinja2) is on
 * the path even in isolated mode. */
static void init_once(void)
{
    if (Py_IsInitialized()) {
        /* embedded in a program that already runs Python: share it */
        PyGILState_STATE gs = PyGILState_Ensure();
        g.status = build_env() ? INFERD_OK : INFERD_ERR_UNAVAILABLE;
        PyGILState_Release(gs);
        return;
    }
    PyConfig cfg;
    PyConfig_InitIsolatedConfig(&cfg);
    cfg.install_signal_handlers = 0;
    cfg.write_bytecode = 0;
    cfg.site_import = 1;
    PyStatus st = PyConfig_SetBytesString(&cfg, &cfg.program_name, INFERD_PYTHON_EXECUTABLE);
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st)) {
        snprintf(g.why, sizeof g.why, "could not start the embedded Python: %s",
                 st.err_msg ? st.err_msg : "unknown error");
        return;
    }
    g.status = build_env() ? INFERD_OK : INFERD_ERR_UNAVAILABLE;
    PyEval_SaveThread(); /* release the GIL: renders take it per call */
}

/* Any thread; cheap after the first call. */
inferd_status srv_jinja_init(void)
{
    pthread_once(&g.once, init_once);
    if (g.status != INFERD_OK)
        return inferd_set_error(g.status, "%s", g.why);
    return INFERD_OK;
}

bool srv_jinja_available(void)
{
    return srv_jinja_init() == INFERD_OK;
}

const char *srv_jinja_version(void)
{
    return srv_jinja_available() ? g.version : g.why;
}

/* Fill *e from a (None, type, message) result tuple or the pending error.
 * GIL held. A well-formed error tuple gives the template's own exception
 * type and text (what a 400 shows the client); anything else (a failed
 * call, a bad tuple) is reported as InternalError with the pending
 * exception's text. Leaves no Python exception set. */
static void result_error(PyObject *res, srv_jinja_error *e)
{
    const char *type = NULL, *msg = NULL;
    if (res && PyTuple_Check(res) && PyTuple_Size(res) == 3) {
        PyObject *t = PyTuple_GetItem(res, 1), *m = PyTuple_GetItem(res, 2);
        type = t && PyUnicode_Check(t) ? PyUnicode_AsUTF8(t) : NULL;
        msg = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
    }
    if (!type || !msg) {
        char ex[sizeof e->message];
        if (PyErr_Occurred())
            take_exception(ex, sizeof ex);
        else
            snprintf(ex, sizeof ex, "unexpected result from the template engine");
        snprintf(e->type, sizeof e->type, "%s", "InternalError");
        snprintf(e->message, sizeof e->message, "%s", ex);
        PyErr_Clear();
        return;
    }
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->message, sizeof e->message, "%s", msg);
}

static void unavailable(srv_jinja_error *e)
{
    snprintf(e->type, sizeof e->type, "%s", "Unavailable");
    snprintf(e->message, sizeof e->message, "%s", g.why);
}

/* Any thread (takes the GIL). The "s" conversion decodes source as UTF-8;
 * invalid bytes fail the call and are reported like a syntax error.
 * PyTuple_GetItem returns a borrowed reference: the template is INCREFed
 * before res is dropped. */
bool srv_jinja_compile(const char *source, srv_jinja **out, srv_jinja_error *e)
{
    *out = NULL;
    memset(e, 0, sizeof *e);
    if (!srv_jinja_available()) {
        unavailable(e);
        return false;
    }
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject *res = PyObject_CallFunction(g.compile_fn, "s", source);
    PyObject *tmpl = res && PyTuple_Check(res) && PyTuple_Size(res) == 3 ? PyTuple_GetItem(res, 0) : NULL;
    bool ok = tmpl && tmpl != Py_None;
    if (ok) {
        Py_INCREF(tmpl);
        *out = inferd_calloc(1, sizeof **out);
        (*out)->tmpl = tmpl;
        PyObject *parts = PyObject_CallFunction(g.content_fn, "s", source);
        (*out)->content_parts = parts == Py_True;
        Py_XDECREF(parts);
        PyErr_Clear(); /* the detection is advisory: a failure means "string" */
    } else {
        result_error(res, e);
    }
    Py_XDECREF(res);
    PyGILState_Release(gs);
    return ok;
}

/* NOTE: needs the GIL to drop the reference, so it must not be called
 * after the interpreter is gone; it never is, since we never finalize. */
void srv_jinja_free(srv_jinja *t)
{
    if (!t)
        return;
    PyGILState_STATE gs = PyGILState_Ensure();
    Py_XDECREF(t->tmpl);
    PyGILState_Release(gs);
    inferd_free(t);
}

/* Copy a Python str out as UTF-8; GIL held.
 * A str with lone surrogates has no UTF-8 form: false with a Python
 * exception pending, which result_error reports. */
static bool copy_text(PyObject *s, char **out, size_t *out_len)
{
    Py_ssize_t n = 0;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u)
        return false;
    *out = inferd_malloc((size_t)n + 1);
    memcpy(*out, u, (size_t)n);
    (*out)[n] = '\0';
    *out_len = (size_t)n;
    return true;
}

bool srv_jinja_iterates_content(const srv_jinja *t)
{
    return t && t->content_parts;
}

/* Any thread; renders from several event-loop threads queue on the GIL.
 * "z" passes fixed_now as None when NULL, "i" continue_final as 0 or 1. On
 * a copy failure the error comes from the pending exception (result_error
 * is given NULL so it does not misread the successful tuple). */
bool srv_jinja_render(const srv_jinja *t, const char *vars_json, const char *fixed_now, bool continue_final,
                      char **out, size_t *out_len, srv_jinja_error *e)
{
    *out = NULL;
    *out_len = 0;
    memset(e, 0, sizeof *e);
    if (!t || !srv_jinja_available()) {
        unavailable(e);
        return false;
    }
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject *res = PyObject_CallFunction(g.render_fn, "Oszi", t->tmpl, vars_json, fixed_now, (int)continue_final);
    PyObject *text = res && PyTuple_Check(res) && PyTuple_Size(res) == 3 ? PyTuple_GetItem(res, 0) : NULL;
    bool ok = text && PyUnicode_Check(text) && copy_text(text, out, out_len);
    if (!ok)
        result_error(text && PyUnicode_Check(text) ? NULL : res, e);
    Py_XDECREF(res);
    PyGILState_Release(gs);
    return ok;
}

#else /* !INFERD_HAVE_JINJA */

struct srv_jinja {
    int unused;
};

/* Built without libpython: every entry point fails with the same reason,
 * so chat routes answer 400 naming it and completions still work. */
static const char k_off[] = "this build has no Jinja engine (INFERD_JINJA=OFF: rebuild with libpython3-dev and "
                            "python3-jinja2 installed)";

inferd_status srv_jinja_init(void)
{
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "%s", k_off);
}

bool srv_jinja_available(void)
{
    return false;
}

const char *srv_jinja_version(void)
{
    return k_off;
}

bool srv_jinja_compile(const char *source, srv_jinja **out, srv_jinja_error *e)
{
    (void)source;
    *out = NULL;
    snprintf(e->type, sizeof e->type, "%s", "Unavailable");
    snprintf(e->message, sizeof e->message, "%s", k_off);
    return false;
}

void srv_jinja_free(srv_jinja *t)
{
    inferd_free(t);
}

bool srv_jinja_iterates_content(const srv_jinja *t)
{
    (void)t;
    return false;
}

bool srv_jinja_render(const srv_jinja *t, const char *vars_json, const char *fixed_now, bool continue_final,
                      char **out, size_t *out_len, srv_jinja_error *e)
{
    (void)t;
    (void)vars_json;
    (void)fixed_now;
    (void)continue_final;
    *out = NULL;
    *out_len = 0;
    snprintf(e->type, sizeof e->type, "%s", "Unavailable");
    snprintf(e->message, sizeof e->message, "%s", k_off);
    return false;
}

#endif
