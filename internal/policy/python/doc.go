// Package python is the policy stage for Python: a runner that the box starts instead
// of the code, and the policy it enforces.
//
// The box is the security boundary. This package is defence in depth and a source of
// clear, early errors an LLM can act on ("import of 'subprocess' is blocked by profile
// 'default'; use Python code instead of shell commands"). Every test that proves the
// host safe must hold with Mode "off"; the tests here prove that the runner refuses
// what it promises to refuse, and nothing an ordinary data-analysis program does.
//
// # Running code
//
// The engine places Support(policy, compiled) under /.moat, sets box.Spec.Interpreter
// to Interpreter(CompiledRunnerPath) (or RunnerPath when it has no compiled runner),
// asks for a report channel (Spec.Report) and decodes it with ParseReport:
//
//	/usr/bin/python3 -u -I -S /.moat/runner.pyc [--check-only] /.moat/main.py
//	    reads /.moat/policy.json, writes JSON lines to fd 3:
//	    {"kind":"violation","rule":"python.import","detail":"...","line":3}
//	    {"kind":"result","repr":"150.0"}
//	    {"kind":"display","mime_type":"image/png","data":"<base64>"}
//	    exits 77 (ExitViolation) when policy refused the code, 70 (ExitInternal)
//	    when the policy is unreadable; --check-only stops after the static layer
//
// After the program (unless a violation ended it), the matplotlib figures it left
// open are rendered to PNG, one display line each (at most MaxDisplays figures and
// MaxDisplayBytes of PNG; a note on stderr says what was left out), and closed.
// MPLBACKEND defaults to Agg.
//
// # Sessions
//
// A session keeps one interpreter and one __main__ for many calls, like a notebook
// kernel. Start the runner with SessionInterpreter(runner); it reads requests from
// fd 4 and reports on fd 3:
//
//	host                                         runner (--session)
//	 |                                             | installs the audit hook
//	 |  <-- {"kind":"ready"} --------------------- | the first line on fd 3
//	 |  --- {"id":N,"bytes":L}\n, L bytes -------> | fd 4: a header, then the code
//	 |                                             | static check; runs in its __main__
//	 |  <-- violation, result, display lines ----- | the call's report (ParseReport)
//	 |  <-- \n{"kind":"done","id":N,"exit":E} ---- | the call's end (box.ParseSessionLine)
//	 |  ...                                        |
//	 |  --- close fd 4 --------------------------> | exits 0
//
// Requests are what box.EncodeCall("python", id, code) writes; use box.NewCallID for
// ids, so that a done line the code forges (it can write to the report channel)
// matches no call. E is 0; 1 for an exception or SyntaxError (traceback on stderr,
// the call's code shown as "<cell k>"); 77 (ExitViolation) when the static layer
// refused the call, which did not run; 130 (ExitInterrupted) when SIGINT interrupted
// it; 70 (ExitInternal) when the code is not UTF-8; for SystemExit the status Python
// would exit with. None of these ends the session. A runtime violation ends the
// interpreter (status 77, no done line), as in a single run: the host restarts it and
// the session's state is gone. A malformed request header ends it with status 70.
// SIGINT outside a call (while the runner waits for a request or writes a report) is
// ignored. Before its done line, a call's output on stdout and stderr is flushed, and
// its figures are reported as displays and closed. Lines can be up to MaxReportLine
// bytes long (a display); box.ParseSessionLine recognises the ready and done lines.
//
// Compile the runner once per interpreter with CompileRunner: Python compiles a
// script on every start, and the runner's 1,500 lines cost 12-20 ms; compiled, the
// default profile adds about 3-4 ms of CPU to a box run, strict about 11 ms (it always
// walks the AST), off under 1 ms (BenchmarkOverhead).
//
// # Two layers
//
// Static checks run before any of the code does. The code is compiled once; when its
// names and string constants touch anything the policy names, its AST is walked for
// imports, denied builtins (by name; identifiers are NFKC-normalised, so ｅｖａｌ is
// eval), denied attributes (also inside string literals: getattr names, format fields
// like '{0.__globals__}'), module rules through import aliases (import os as o;
// o.system), sys.modules['x'], __import__('x') and literal file paths. Any finding
// stops the run with status 77 before the code starts.
//
// Runtime checks are a PEP 578 audit hook (sys.addaudithook) installed just before the
// code runs: imports, dynamic code (compile, exec, marshal, code and function
// objects), processes, signals, sockets, ctypes, files, unpickling, sensitive
// attributes and frames, tracing, gc and audit hooks. A violation is reported and the
// process ends at once (os._exit(77)), so code cannot catch it and keep probing.
// runner.py's docstring lists every audit event used.
//
// # Origin rule
//
// Libraries must keep working: pandas imports subprocess, dataclasses and namedtuple
// exec generated code, matplotlib runs fc-list. So a frame is library code when its
// code object's file lies under the interpreter's library directories (or is frozen),
// and user code otherwise: the program, modules it writes, and code compiled from
// strings, even by a library (timeit, doctest, code and runpy cannot launder code).
//
//   - Imports and dynamic code are refused when user code asks, or when a library
//     frame only relays a callable (threading's run(), an event loop callback)
//     instead of naming the import or calling exec/eval/compile itself.
//   - Processes, network and file writes are refused whoever asks: a violation when
//     the request traces back to user code (past the stdlib modules that only carry
//     it out, and past library frames that do not name the API, like pandas'
//     apply(os.system)); a PermissionError when a library asked on its own
//     (matplotlib then lists fonts without fc-list).
//   - ctypes is refused while user code is on the stack, except inside an import.
//   - Unpickling dangerous globals, files under /.moat, gc introspection and audit
//     hooks are refused whoever asks.
//
// # Known limits
//
// In-process checks can be bypassed by a determined program: importlib internals
// reached by computed attribute names load modules without an import event; frames
// and __globals__ reached through library callbacks raise no event; module rules
// are enforced at run time only where an audit event exists; native code loaded by an
// allowed library is not watched; the report channel can be written by the code
// (a session's done lines too, so call ids must be random); in a session, code that
// reaches the runner's frames can also run code it compiles.
// None of this is a hole in the box, which is the boundary.
package python
