package python

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// finding is a violation without its detail, for tables.
type finding struct {
	Rule string
	Line int
}

func findings(o outcome) []finding {
	var fs []finding
	for _, v := range o.Report.Violations {
		fs = append(fs, finding{v.Rule, v.Line})
	}
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].Line != fs[j].Line {
			return fs[i].Line < fs[j].Line
		}
		return fs[i].Rule < fs[j].Rule
	})
	return fs
}

func sandboxPolicy() Policy {
	p := DefaultPolicy()
	p.FileAccess = FileSandbox
	return p
}

// TestStaticChecks runs small programs through the static layer. Each is prefixed
// with print("RAN") (so lines below count from 2): a refused program must not print
// it, since the static layer stops it before any of it runs.
func TestStaticChecks(t *testing.T) {
	strict := StrictPolicy()
	for _, tc := range []struct {
		name   string
		policy *Policy // DefaultPolicy when nil
		code   string
		want   []finding // nil: the program runs and exits 0
	}{
		{"import denied", nil, "import subprocess", []finding{{"python.import", 2}}},
		{"import denied submodule", nil, "import multiprocessing.pool", []finding{{"python.import", 2}}},
		{"from-import denied", nil, "from subprocess import run", []finding{{"python.import", 2}}},
		{"relative import names", nil, "try:\n    from . import socket\nexcept ImportError:\n    pass", []finding{{"python.import", 3}}},
		{"import allowed", nil, "import os.path, json\nfrom collections import Counter", nil},
		{"alias call", nil, "import os as o\no.system('true')", []finding{{"python.call", 3}}},
		{"from-import function", nil, "from os import system", []finding{{"python.call", 2}}},
		{"from-import allowed names", nil, "from os import path, getcwd\nprint(getcwd() == path.abspath('.'))", nil},
		{"assigned alias", nil, "import os\nx = os\ny = x\ny.popen('ls')", []finding{{"python.call", 5}}},
		{"glob rule", nil, "import os\nos.execvp('ls', ['ls'])", []finding{{"python.call", 3}}},
		{"posix is os", nil, "import posix\nposix.system('true')", []finding{{"python.call", 3}}},
		{"getattr literal on module", nil, "import os\ngetattr(os, 'system')('true')", []finding{{"python.call", 3}}},
		{"sys.modules", nil, "import sys\nsys.modules['os'].system('true')", []finding{{"python.call", 3}}},
		{"sys.modules denied", nil, "import sys\nsys.modules['subprocess']", []finding{{"python.import", 3}}},
		{"__import__ literal", nil, "__import__('socket')", []finding{{"python.builtin", 2}, {"python.import", 2}}},
		{"__import__ then attribute", nil, "__import__('os').system('true')", []finding{{"python.builtin", 2}, {"python.call", 2}}},
		{"import_module literal", nil, "import importlib\nimportlib.import_module('os')", []finding{{"python.import", 2}}},
		{"eval call", nil, "eval('1')", []finding{{"python.builtin", 2}}},
		{"eval reference", nil, "f = eval", []finding{{"python.builtin", 2}}},
		{"fullwidth eval", nil, "ｅｖａｌ('1')", []finding{{"python.builtin", 2}}},
		{"exec decorator", nil, "@exec\n@lambda _: 'x = 1'\nclass X:\n    pass", []finding{{"python.builtin", 2}}},
		{"lambda default", nil, "f = lambda i=__import__: i", []finding{{"python.builtin", 2}}},
		{"breakpoint", nil, "breakpoint()", []finding{{"python.builtin", 2}}},
		{"__builtins__ name", nil, "__builtins__['eval']", []finding{{"python.builtin", 2}, {"python.builtin", 2}}},
		{"builtins module attribute", nil, "import builtins\nbuiltins.exec('1')", []finding{{"python.builtin", 3}}},
		{"builtins dict subscript", nil, "import builtins\nvars(builtins)['eval']", []finding{{"python.builtin", 3}}},
		{"from builtins import", nil, "from builtins import eval", []finding{{"python.builtin", 2}}},
		{"re.compile is not compile", nil, "import re\nprint(re.compile('a+').match('aa') is not None)", nil},
		{"compile imported from re", nil, "from re import compile\ncompile('a')", nil},
		{"compile defined by the program", nil, "def compile(x):\n    return x\ncompile(1)", nil},
		{"denied attributes", nil, "x = ().__class__.__bases__[0].__subclasses__()", []finding{{"python.attribute", 2}, {"python.attribute", 2}}},
		{"attribute deleted", nil, "def f():\n    pass\ndel f.__code__", []finding{{"python.attribute", 4}}},
		{"getattr string", nil, "getattr(len, '__globals__', None)", []finding{{"python.attribute", 2}}},
		{"getattr concatenation", nil, "getattr(len, '__glo' + 'bals__', None)", []finding{{"python.attribute", 2}}},
		{"format field", nil, "def f():\n    pass\nprint('{0.__globals__}'.format(f))", []finding{{"python.attribute", 4}}},
		{"f-string attribute", nil, "def f():\n    pass\nprint(f'{f.__globals__}')", []finding{{"python.attribute", 4}}},
		{"attrgetter path", nil, "import operator\noperator.attrgetter('a.__code__')", []finding{{"python.attribute", 3}}},
		{"match class attributes", nil, "match 1:\n    case object(__code__=c):\n        pass", []finding{{"python.attribute", 3}}},
		{"word boundary", nil, "print('self_backup and __mro__x are not attributes')", nil},
		{"frames", nil, "import sys\nsys._getframe()", []finding{{"python.attribute", 3}}},
		{"tracing", nil, "import sys\nsys.settrace(None)", []finding{{"python.hook", 3}}},
		{"gc", nil, "import gc\ngc.get_objects()", []finding{{"python.hook", 3}}},
		{"module through attribute", nil, "import asyncio\nasyncio.subprocess", []finding{{"python.import", 3}}},
		{"star import from denylist rules module", nil, "from os import *\nprint(sep)", nil},
		{"moat path", nil, "print(open('/.moat/policy.json').read())", []finding{{"python.file", 2}}},
		{"several findings in order", nil, "import os\nx = 1\nos.system('a')\neval('x')", []finding{{"python.call", 4}, {"python.builtin", 5}}},
		{"trailing expression checked", nil, "x = 1\neval('x')", []finding{{"python.builtin", 3}}},
		{"dunders of ordinary classes", nil, "class A:\n    def __init__(self):\n        self.v = 1\n" +
			"    def __repr__(self):\n        return f'{self.__class__.__name__}({self.__dict__})'\n" +
			"    def __eq__(self, o):\n        return vars(self) == vars(o)\n    __hash__ = None\n" +
			"class B(A):\n    def __init__(self):\n        super().__init__()\nprint(B() == B(), repr(B()), B.__name__, B.__qualname__)", nil},
		{"sandbox write outside", ptr(sandboxPolicy()), "open('/etc/moat-test', 'w')", []finding{{"python.file", 2}}},
		{"sandbox write mode keyword", ptr(sandboxPolicy()), "open('/etc/moat-test', mode='a')", []finding{{"python.file", 2}}},
		{"sandbox pathlib write", ptr(sandboxPolicy()), "from pathlib import Path\nPath('/etc/moat-test').write_text('x')", []finding{{"python.file", 3}}},
		{"sandbox write in workdir", ptr(sandboxPolicy()), "import os\nopen('out.txt', 'w').write('x')\nopen('/tmp/moat-static-test', 'w').close()\nos.remove('/tmp/moat-static-test')", nil},
		{"sandbox read anywhere", ptr(sandboxPolicy()), "print(len(open('/etc/hostname').read()) >= 0)", nil},
		{"strict allowlist", &strict, "import requests", []finding{{"python.import", 2}}},
		{"strict allowed", &strict, "import os.path, json, numpy\nprint(os.path.join('a', 'b'))", nil},
		{"strict os rule", &strict, "import os\nos.system('true')", []finding{{"python.call", 3}}},
		{"strict star import", &strict, "from os import *", []finding{{"python.call", 2}}},
		{"strict builtin", &strict, "print(globals())", []finding{{"python.builtin", 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			if tc.policy != nil {
				p = *tc.policy
			}
			o := runCode(t, p, "print('RAN')\n"+tc.code+"\n", runOpts{})
			got := findings(o)
			if tc.want == nil {
				if o.Exit != 0 || len(got) != 0 {
					t.Fatalf("want the program to run\n%s", o)
				}
				return
			}
			if o.Exit != ExitViolation || strings.Contains(o.Stdout, "RAN") {
				t.Fatalf("want status 77 before the program runs\n%s", o)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("findings %v, want %v\n%s", got, tc.want, o.RawReport)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestStaticDetails checks the wording an LLM reads.
func TestStaticDetails(t *testing.T) {
	for _, tc := range []struct {
		code, want string
	}{
		{"import subprocess", "import of 'subprocess' is blocked by profile 'default'; use Python code instead of shell commands"},
		{"import socket", "import of 'socket' is blocked by profile 'default' (the box has no network)"},
		{"import os\nos.system('whoami')", "call of os.system is blocked by profile 'default'; use Python code instead of shell commands"},
		{"eval('1')", "call of eval() is blocked by profile 'default'; write the code directly instead of building it as a string"},
		{"x = ().__class__.__subclasses__", "access to attribute '__subclasses__' is blocked by profile 'default'; introspection of interpreter internals is not allowed"},
	} {
		o := runCode(t, DefaultPolicy(), tc.code, runOpts{})
		if len(o.Report.Violations) == 0 || o.Report.Violations[0].Detail != tc.want {
			t.Errorf("%q: details %v, want %q", tc.code, o.Report.Violations, tc.want)
		}
	}
}

// TestStaticFastPath checks that skipping the AST walk in allowlist and sandbox mode
// (imports read from the bytecode, literal writes looked for in the constants) gives
// the same static result as the walk, which MOAT_PYTHON_STATIC_WALK=always forces.
func TestStaticFastPath(t *testing.T) {
	strict := StrictPolicy()
	sandbox := sandboxPolicy()
	for _, tc := range []struct {
		name   string
		policy Policy
		code   string
		want   []finding
	}{
		{"strict allowed imports", strict, "import json, math\nfrom collections import Counter, defaultdict\n" +
			"from os import path\nimport os.path\ndef f():\n    import re\n    from datetime import date\n    return re, date\n" +
			"class C:\n    import random\nprint(json.dumps([math.pi > 3, Counter('aab')['a'], path.sep]), f()[0].__name__)", nil},
		{"strict disallowed import line", strict, "import json\nx = 1\nimport socket\nimport math", []finding{{"python.import", 4}}},
		{"strict disallowed import in function", strict, "import json\ndef f():\n    from urllib import request\n    return request",
			[]finding{{"python.import", 4}}},
		{"strict disallowed from-import", strict, "from collections import Counter\nfrom http import client", []finding{{"python.import", 3}}},
		{"strict dead import", strict, "import json\nif 0:\n    import subprocess", []finding{{"python.import", 4}}},
		{"strict import after return", strict, "def f():\n    import json; return; import socket", []finding{{"python.import", 3}}},
		{"strict relative import", strict, "try:\n    from . import socket\nexcept ImportError:\n    pass", []finding{{"python.import", 3}}},
		{"strict import in finally", strict, "try:\n    pass\nfinally:\n    import json\nprint(json.dumps(1))", nil},
		{"strict import word in a string", strict, "import json\nprint('import subprocess')", nil},
		{"strict sandbox write", strict, "import json\nopen('/etc/moat-test', 'w')", []finding{{"python.file", 3}}},
		{"strict pathlib alias write", strict, "from pathlib import Path as P\nP('/etc/moat-test').write_text('x')", []finding{{"python.file", 3}}},
		{"sandbox keyword write", sandbox, "import json\nopen(mode='w', file='/etc/moat-test')", []finding{{"python.file", 3}}},
		{"sandbox variable path", sandbox, "import os\np = '/etc/hostname'\nprint(len(open(p).read()) >= 0)", nil},
		{"sandbox write in workdir", sandbox, "with open('out.txt', 'w') as f:\n    f.write('x')", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code := "print('RAN')\n" + tc.code + "\n"
			fast := runCode(t, tc.policy, code, runOpts{checkOnly: true})
			walk := runCode(t, tc.policy, code, runOpts{checkOnly: true, extraEnv: []string{"MOAT_PYTHON_STATIC_WALK=always"}})
			if fast.Exit != walk.Exit || fast.RawReport != walk.RawReport {
				t.Fatalf("fast path and walk differ\nfast:\n%s\nwalk:\n%s", fast, walk)
			}
			if got := findings(fast); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("findings %v, want %v\n%s", got, tc.want, fast)
			}
			if tc.want == nil {
				if o := runCode(t, tc.policy, code, runOpts{}); o.Exit != 0 || !strings.Contains(o.Stdout, "RAN") {
					t.Errorf("want the program to run\n%s", o)
				}
			}
		})
	}
}
