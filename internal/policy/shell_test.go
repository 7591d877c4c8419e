package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"github.com/moat-sandbox/moat/internal/box"
)

var allowRules = ShellRules{
	Profile: "test",
	Allow:   []string{"ls", "cat", "grep", "echo", "head", "tail", "wc", "sort", "sed", "awk"},
}

var denyRules = ShellRules{Profile: "test", Deny: []string{"curl", "wget", "nc"}}

// wantRule asserts that vs has a violation with rule whose detail contains want.
func wantRule(t *testing.T, vs []box.Violation, rule, want string) {
	t.Helper()
	for _, v := range vs {
		if v.Rule == rule && strings.Contains(v.Detail, want) {
			return
		}
	}
	t.Errorf("want a %s violation mentioning %q, got %+v", rule, want, vs)
}

func TestCheckShellAllowlistBlocks(t *testing.T) {
	tests := []struct {
		name, script, rule, detail string
	}{
		{"rm", `rm -rf /`, RuleShellCommand, `"rm"`},
		{"curl", `curl http://x`, RuleShellCommand, `"curl"`},
		{"wget", `wget x`, RuleShellCommand, `"wget"`},
		{"nc", `nc -l 80`, RuleShellCommand, `"nc"`},
		{"command substitution", `echo $(curl x)`, RuleShellCommand, `"curl"`},
		{"backticks", "echo `wget x`", RuleShellCommand, `"wget"`},
		{"eval of decoded string", `eval "$(echo Y3VybA== | base64 -d)"`, RuleShellWrapper, `"eval"`},
		{"bash -c", `bash -c 'curl x'`, RuleShellCommand, `"curl"`},
		{"absolute path", `/usr/bin/curl x`, RuleShellCommand, `"curl" (as "/usr/bin/curl")`},
		{"relative path", `./curl x`, RuleShellCommand, `"curl"`},
		{"env", `env curl x`, RuleShellCommand, `"curl" (run by "env")`},
		{"env with options and assignments", `env -i A=1 curl x`, RuleShellCommand, `"curl" (run by "env")`},
		{"timeout", `timeout 5 curl x`, RuleShellCommand, `"curl" (run by "timeout")`},
		{"xargs", `xargs curl < f`, RuleShellCommand, `"curl" (run by "xargs")`},
		{"process substitution", `cat <(curl x)`, RuleShellCommand, `"curl"`},
		{"function body", `f() { curl x; }; f`, RuleShellCommand, `"curl"`},
		{"if condition", `if curl x; then echo; fi`, RuleShellCommand, `"curl"`},
		{"for body", `for i in 1; do wget x; done`, RuleShellCommand, `"wget"`},
		{"assignment value", `x=$(nc h 1)`, RuleShellCommand, `"nc"`},
		{"parameter default", `echo ${x:-$(curl y)}`, RuleShellCommand, `"curl"`},
		{"test clause", `[[ $(curl x) ]]`, RuleShellCommand, `"curl"`},
		{"sh -c computed", `sh -c "$v"`, RuleShellWrapper, "sh -c"},
		{"computed command", `$cmd x`, RuleShellDynamic, "`$cmd`"},
		{"computed command in quotes", `"$(echo curl)" x`, RuleShellDynamic, "computed"},
		{"braced variable command", `${x} y`, RuleShellDynamic, "computed"},
		{"pipeline of unknowns", `a | b`, RuleShellCommand, `"b"`},
		{"source", `source x.sh`, RuleShellWrapper, `"source"`},
		{"dot", `. x.sh`, RuleShellWrapper, `"."`},
		{"exec", `exec curl`, RuleShellCommand, `"curl" (run by "exec")`},
		{"busybox", `busybox wget x`, RuleShellCommand, `"wget" (run by "busybox")`},
		{"find -exec", `find . -exec rm {} \;`, RuleShellCommand, `"rm" (run by "find -exec")`},
		{"python -c", `python3 -c 'print(1)'`, RuleShellWrapper, "language python"},
		{"awk system", `awk 'BEGIN{system("id")}'`, RuleShellWrapper, "system()"},
		{"here-document", "cat <<EOF\n$(curl x)\nEOF", RuleShellCommand, `"curl"`},
		{"here-string", `cat <<< "$(curl x)"`, RuleShellCommand, `"curl"`},
		{"coproc", `coproc curl x`, RuleShellCommand, `"curl"`},
		{"redirection target", `echo hi > $(curl x)`, RuleShellCommand, `"curl"`},
		{"time keyword", `time curl x`, RuleShellCommand, `"curl"`},
		{"subshell", `(curl x)`, RuleShellCommand, `"curl"`},
		{"block", `{ curl x; }`, RuleShellCommand, `"curl"`},
		{"or list", `false || curl x`, RuleShellCommand, `"curl"`},
		{"while condition", `while curl x; do :; done`, RuleShellCommand, `"curl"`},
		{"until body", `until false; do wget x; done`, RuleShellCommand, `"wget"`},
		{"case body", `case $x in a) curl x;; esac`, RuleShellCommand, `"curl"`},
		{"case word", `case $(curl x) in a) :;; esac`, RuleShellCommand, `"curl"`},
		{"arithmetic", `echo $(( $(curl x) + 1 ))`, RuleShellCommand, `"curl"`},
		{"arithmetic command", `(( $(curl x) ))`, RuleShellCommand, `"curl"`},
		{"declare value", `declare x=$(curl y)`, RuleShellCommand, `"curl"`},
		{"local value", `f() { local x=$(curl y); }; f`, RuleShellCommand, `"curl"`},
		{"export value", `export X="$(wget y)"`, RuleShellCommand, `"wget"`},
		{"array value", `a=(1 $(curl x))`, RuleShellCommand, `"curl"`},
		{"array index", `a[$(curl x)]=1`, RuleShellCommand, `"curl"`},
		{"replacement", `echo ${x/a/$(curl y)}`, RuleShellCommand, `"curl"`},
		{"nested substitution", `echo "$(echo "$(curl x)")"`, RuleShellCommand, `"curl"`},
		{"quoted command name", `"cu"rl x`, RuleShellCommand, `"curl"`},
		{"escaped command name", `c\url x`, RuleShellCommand, `"curl"`},
		{"globbed command name", `/usr/bin/cur? x`, RuleShellDynamic, "computed"},
		{"ansi-c command name", `$'\x63url' x`, RuleShellDynamic, "computed"},
		{"not allowed list", `rm x`, RuleShellCommand, "(allowed: awk, cat, echo, grep, head, ls, sed, sort, tail, wc)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantRule(t, CheckShell(tt.script, allowRules), tt.rule, tt.detail)
		})
	}
}

func TestCheckShellAllowlistPasses(t *testing.T) {
	tests := []struct{ name, script string }{
		{"pipeline", `ls -la | grep foo | sort | head -5`},
		{"cat wc", `cat f.txt | wc -l`},
		{"sed", `echo "a b" | sed 's/a/b/'`},
		{"awk print", `awk '{print $1}' f | sort | tail -3`},
		{"assignment", `x=1; echo $x`},
		{"for loop", `for f in *.txt; do wc -l "$f"; done`},
		{"test bracket", `if [ -f x ]; then cat x; fi`},
		{"function", `f() { echo hi; }; f`},
		{"substitution", `echo $(ls)`},
		{"cd", `cd /tmp && ls`},
		{"multi-line with comments", `#!/bin/bash
# count the lines of every log
set -euo pipefail
total=0
for f in logs/*.log; do   # each file
	n=$(wc -l < "$f")
	total=$((total + n))
done
echo "total: $total"
`},
		{"builtins", `read -r line < f; printf '%s\n' "$line"; test -n "$line" && true; pwd; shift; :`},
		{"local and declare", `f() { local -a xs=(1 2); declare -A m=([k]=v); echo "${xs[@]}" "${m[k]}"; }; f`},
		{"function defined after use in body", `main() { helper; }; helper() { echo hi; }; main "$@"`},
		{"recursive function", `f() { if [ "$1" -gt 0 ]; then f $(( $1 - 1 )); fi; }; f 3`},
		{"function in substitution", `f() { echo hi; }; x=$(f)`},
		{"trap calling function", `cleanup() { echo bye; }; trap cleanup EXIT`},
		{"trap literal", `trap 'echo done' EXIT`},
		{"wrapped allowed", `timeout 5 grep -r x . | env LC_ALL=C sort | nice -n 5 head`},
		{"xargs allowed", `ls | xargs -n1 wc -l`},
		{"bash -c allowed", `bash -c 'ls | wc -l'`},
		{"here-document to bash", "bash <<'EOF'\nls\nEOF"},
		{"exec redirections", `exec > log 2>&1`},
		{"command -v", `command -v curl >/dev/null || echo missing`},
		{"type", `type curl`},
		{"sed script", `sed -n -e '/^#/d' -e 's|a|b|g;1i header' -e '$a\' -e 'footer' f`},
		{"sed join lines", `sed ':a;N;$!ba;s/\n/ /g' f`},
		{"sed sandbox computed", `sed --sandbox "s/$a/$b/" f`},
		{"awk regex alternation", `awk '/a|b/ { n++ } END { print n / 2 }' f`},
		{"awk -v", `awk -v n="$n" -F: '$3 > n { print $1 }' /etc/passwd`},
		{"awk or", `awk '$1 || $2 { print "a|b" }' f`},
		{"arithmetic", `i=0; while (( i < 3 )); do i=$((i+1)); done; let i++`},
		{"case", `case "$1" in -h|--help) echo usage;; *) cat "$1";; esac`},
		{"heredoc literal", "cat <<'EOF'\n$(curl x) is just text\nEOF"},
		{"escaped substitution", `echo "\$(curl x)"`},
		{"single quoted", `echo '$(curl x)'`},
		{"command allowed", `command ls`},
		{"empty", ``},
		{"comment only", `# curl x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if vs := CheckShell(tt.script, allowRules); vs != nil {
				t.Errorf("want no violations, got %+v", vs)
			}
		})
	}
}

func TestCheckShellDenylist(t *testing.T) {
	tests := []struct {
		name, script string
		rule         string // "" means the script passes
	}{
		{"ls", `ls`, ""},
		{"curl", `curl`, RuleShellCommand},
		{"env curl", `env curl`, RuleShellCommand},
		{"eval", `eval x`, RuleShellWrapper},
		{"bash -c wget", `bash -c 'wget x'`, RuleShellCommand},
		{"bash -c ls", `bash -c 'ls'`, ""},
		{"unlisted command", `rm -rf build`, ""},
		{"python -c", `python3 -c 'print(1)'`, ""},
		{"function named like a denied command", `curl() { echo fake; }; curl x`, ""},
		{"function unset before use", `curl() { echo; }; unset -f curl; curl x`, RuleShellCommand},
		{"command bypasses function", `curl() { echo; }; command curl x`, RuleShellCommand},
		{"env bypasses function", `curl() { echo; }; env curl x`, RuleShellCommand},
		{"function defined after use", `curl x; curl() { :; }`, RuleShellCommand},
		{"function called before a later definition", `g() { curl x; }; g; curl() { :; }`, RuleShellCommand},
		{"conditional definition", `true && curl() { :; }; curl x`, RuleShellCommand},
		{"definition in a subshell", `(curl() { :; }); curl x`, RuleShellCommand},
		{"definition in the background", `curl() { :; } & curl x`, RuleShellCommand},
		{"posix mode", `curl() { :; }; set -o posix; curl x`, RuleShellCommand},
		{"computed command", `c=curl; $c x`, RuleShellDynamic},
		{"sh -c computed", `sh -c "$v"`, RuleShellWrapper},
		{"bash script file", `bash x.sh`, RuleShellWrapper},
		{"pipe into bash", `echo ls | bash`, RuleShellWrapper},
		{"here-document into bash", "bash <<'EOF'\nwget x\nEOF", RuleShellCommand},
		{"here-string into sh", `sh <<< 'nc -l 1'`, RuleShellCommand},
		{"nested shells", `bash -c "sh -c 'curl x'"`, RuleShellCommand},
		{"trap action", `trap 'curl x' EXIT`, RuleShellCommand},
		{"trap computed", `trap "$a" EXIT`, RuleShellWrapper},
		{"xargs replace into sh", `xargs -I{} sh -c 'echo {}'`, RuleShellWrapper},
		{"xargs computed command", `xargs -I% % x`, RuleShellWrapper},
		{"find exec sh", `find . -exec sh -c 'curl "$1"' _ {} \;`, RuleShellCommand},
		{"find computed exec", `find . -exec "$c" {} \;`, RuleShellWrapper},
		{"find unquoted computed", `find $dir -name x`, RuleShellWrapper},
		{"find computed start then path", `find "$d" curl \;`, RuleShellWrapper},
		{"find exec hidden after computed terminator", `find . -exec echo "$t" -exec curl x \;`, RuleShellCommand},
		{"find quoted computed", `find "$dir" -name "$pat" -exec grep -l "$x" {} +`, ""},
		{"timeout options", `timeout -s KILL -k 5 10 curl x`, RuleShellCommand},
		{"timeout computed", `timeout "$t" ls`, RuleShellWrapper},
		{"nice old style", `nice -5 wget x`, RuleShellCommand},
		{"nohup", `nohup nc -l 1 &`, RuleShellCommand},
		{"stdbuf", `stdbuf -oL curl x`, RuleShellCommand},
		{"setsid", `setsid -f wget x`, RuleShellCommand},
		{"time binary", `/usr/bin/time -v curl x`, RuleShellCommand},
		{"flock command", `flock /tmp/l curl x`, RuleShellCommand},
		{"flock -c", `flock /tmp/l -c 'curl x'`, RuleShellCommand},
		{"ionice", `ionice -c 3 wget x`, RuleShellCommand},
		{"env split string", `env -S 'curl x'`, RuleShellWrapper},
		{"env unknown option", `env --frobnicate curl`, RuleShellWrapper},
		{"env abbreviated option", `env --unset=X --ignore-e curl x`, RuleShellCommand},
		{"exec with options", `exec -a name curl x`, RuleShellCommand},
		{"builtin eval", `builtin eval x`, RuleShellWrapper},
		{"command eval", `command eval x`, RuleShellWrapper},
		{"alias", `alias ll='curl x'`, RuleShellWrapper},
		{"hash -p", `hash -p ./x ls`, RuleShellWrapper},
		{"mapfile callback", `mapfile -C 'curl x' -c 1 a < f`, RuleShellWrapper},
		{"enable", `enable -f ./x.so x`, RuleShellWrapper},
		{"fc", `fc -s ls`, RuleShellWrapper},
		{"compgen -C", `compgen -C 'curl x' w`, RuleShellWrapper},
		{"prompt expansion", `x='$(curl y)'; echo "${x@P}"`, RuleShellWrapper},
		{"PS4", `PS4='$(curl x)' bash -xc ls`, RuleShellWrapper},
		{"BASH_ENV", `export BASH_ENV=./x.sh`, RuleShellWrapper},
		{"LD_PRELOAD via env", `env LD_PRELOAD=./x.so ls`, RuleShellWrapper},
		{"nameref to PS4", `declare -n r=PS4; r='$(curl x)'`, RuleShellWrapper},
		{"computed declare name", `declare "$n=1"`, RuleShellDynamic},
		{"read into PS4", `read -r PS4 < f`, RuleShellWrapper},
		{"alias through BASH_ALIASES", "shopt -s expand_aliases\nBASH_ALIASES[ls]='curl x'\nls", RuleShellWrapper},
		{"hash through BASH_CMDS", `BASH_CMDS[ls]=./x; ls`, RuleShellWrapper},
		{"printf -v computed", `printf -v "$n" '%s' x`, RuleShellDynamic},
		{"subscript substitution", `read 'a[$(curl x)]' < f`, RuleShellDynamic},
		{"interactive bash", `bash -ic 'ls'`, RuleShellWrapper},
		{"sudo", `sudo ls`, RuleShellWrapper},
		{"zsh", `zsh -c 'ls'`, RuleShellWrapper},
		{"parallel", `parallel curl ::: a b`, RuleShellWrapper},
		{"sed e command", `sed '1e id' f`, RuleShellWrapper},
		{"sed e flag", `sed 's/.*/id/e' f`, RuleShellWrapper},
		{"sed e flag with other flags", `sed -n 's|x|y|gpe' f`, RuleShellWrapper},
		{"sed computed script", `sed "s/$a/$b/" f`, RuleShellWrapper},
		{"sed script file", `sed -f x.sed f`, RuleShellWrapper},
		{"sed unreadable", `sed 's/a/b' f`, RuleShellWrapper},
		{"awk pipe to command", `awk '{ print | "sh" }' f`, RuleShellWrapper},
		{"awk getline from command", `awk 'BEGIN { "id" | getline x }'`, RuleShellWrapper},
		{"awk pipe to variable", `awk 'BEGIN { c = "curl x"; print | c }'`, RuleShellWrapper},
		{"gawk indirect call", `gawk 'BEGIN { f = "system"; @f("id") }'`, RuleShellWrapper},
		{"gawk load", `gawk '@load "x"; BEGIN {}'`, RuleShellWrapper},
		{"awk program file", `awk -f x.awk f`, RuleShellWrapper},
		{"awk computed program", `awk "{ print $x }" f`, RuleShellWrapper},
		{"awk division then pipe", `awk '{ x = $1 / 2 | "sh" }' f`, RuleShellWrapper},
		{"sort compress program", `sort --compress-program=sh f`, RuleShellWrapper},
		{"sort abbreviated option", `sort --compress=sh f`, RuleShellWrapper},
		{"split filter", `split --filter='curl x' f`, RuleShellWrapper},
		{"tar to-command", `tar -xf a.tar --to-command=sh`, RuleShellWrapper},
		{"tar checkpoint is fine", `tar --checkpoint=100 -xf a.tar`, ""},
		{"tar old style -I", `tar xIf sh a.tar`, RuleShellWrapper},
		{"busybox sh", `busybox sh -c 'nc -l 1'`, RuleShellCommand},
		{"xargs sh -c", `xargs sh -c 'wget "$1"' _`, RuleShellCommand},
		{"deep wrappers", `env nice timeout 5 stdbuf -o0 xargs curl`, RuleShellCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := CheckShell(tt.script, denyRules)
			if tt.rule == "" {
				if vs != nil {
					t.Errorf("want no violations, got %+v", vs)
				}
				return
			}
			wantRule(t, vs, tt.rule, "")
		})
	}
}

func TestCheckShellDetails(t *testing.T) {
	vs := CheckShell(`curl x`, ShellRules{Profile: "default", Deny: []string{"curl"}})
	want := []box.Violation{{Rule: RuleShellCommand, Detail: `command "curl" is blocked by profile "default"`, Line: 1}}
	if len(vs) != 1 || vs[0] != want[0] {
		t.Errorf("got %+v, want %+v", vs, want)
	}
	vs = CheckShell(`curl x`, ShellRules{Profile: "default", Allow: []string{"echo", "cat", "awk"}})
	want = []box.Violation{{Rule: RuleShellCommand, Detail: `command "curl" is not allowed by profile "default" (allowed: awk, cat, echo)`, Line: 1}}
	if len(vs) != 1 || vs[0] != want[0] {
		t.Errorf("got %+v, want %+v", vs, want)
	}
}

func TestCheckShellLines(t *testing.T) {
	script := `#!/bin/bash
# fetch things
ls -la

echo "$(curl x)"
for f in *; do
	cat "$f" |
		wget -q x
done
bash -c 'ls
nc -l 1'
cat <<EOF
text
$(rm -rf /)
EOF
curl again
`
	vs := CheckShell(script, allowRules)
	want := map[string]int{`"curl"`: 5, `"wget"`: 8, `"nc"`: 11, `"rm"`: 14}
	for name, line := range want {
		found := false
		for _, v := range vs {
			if strings.Contains(v.Detail, name) && v.Line == line {
				found = true
			}
		}
		if !found {
			t.Errorf("want %s on line %d, got %+v", name, line, vs)
		}
	}
	// curl on line 5 and 16 are two violations; nothing is reported twice.
	if len(vs) != 5 {
		t.Errorf("want 5 violations, got %d: %+v", len(vs), vs)
	}
	for i := 1; i < len(vs); i++ {
		if vs[i].Line < vs[i-1].Line {
			t.Errorf("violations not ordered by line: %+v", vs)
		}
	}
}

func TestCheckShellDeduplicates(t *testing.T) {
	vs := CheckShell(`curl a; curl b; echo $(curl c)`, allowRules)
	if len(vs) != 1 {
		t.Errorf("want one violation, got %+v", vs)
	}
}

func TestCheckShellParseError(t *testing.T) {
	tests := []struct {
		name, script string
		line         int
	}{
		{"unclosed substitution", `echo $(`, 1},
		{"unclosed quote on line 3", "ls\necho ok\necho 'oops\n", 3},
		{"bad if", "ls\nif true; then\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := CheckShell(tt.script, allowRules)
			if len(vs) != 1 || vs[0].Rule != RuleShellParse || vs[0].Detail == "" {
				t.Fatalf("want one %s violation, got %+v", RuleShellParse, vs)
			}
			if vs[0].Line < 1 || vs[0].Line > tt.line {
				t.Errorf("line = %d, want 1..%d", vs[0].Line, tt.line)
			}
		})
	}
	wantRule(t, CheckShell(`bash -c 'echo $('`, allowRules), RuleShellParse, "bash -c")
}

func TestCheckShellProfileNames(t *testing.T) {
	r := ShellRules{Profile: "p", Allow: []string{" /usr/bin/jq ", ""}, Deny: []string{"echo"}}
	if vs := CheckShell(`jq . f`, r); vs != nil {
		t.Errorf("allow entries are judged by base name: %+v", vs)
	}
	wantRule(t, CheckShell(`echo hi`, r), RuleShellCommand, `"echo" is blocked`)
	if vs := CheckShell(`eval "$x"; echo $(`, ShellRules{Profile: "off", Allow: []string{""}}); vs != nil {
		t.Errorf("a profile without shell rules enforces nothing: %+v", vs)
	}
}

func TestShellAwkRunsCommands(t *testing.T) {
	tests := []struct {
		prog string
		want bool
	}{
		{`{print $1}`, false},
		{`BEGIN{system("id")}`, true},
		{`BEGIN{ system ("id") }`, true},
		{`{ print > "out.txt" }`, false},
		{`{ print | "sort" }`, true},
		{`{ "date" | getline d }`, true},
		{`{ print |& "cat" }`, true},
		{`/a|b/ { print }`, false},
		{`$1 ~ /x[|]y/ { print "a | b" }`, false},
		{`{ n = $1 / 2; m = n / 3 } # a | b`, false},
		{`{ if (a || b) print }`, false},
		{`{ mysystem = 1; print mysystem }`, false},
		{`{ x = "system(" }`, false},
		{`@load "ext"`, true},
		{`@namespace "x"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.prog, func(t *testing.T) {
			if got := awkRunsCommands(tt.prog); got != tt.want {
				t.Errorf("awkRunsCommands(%q) = %v, want %v", tt.prog, got, tt.want)
			}
		})
	}
}

func TestShellSedRunsCommands(t *testing.T) {
	tests := []struct {
		script   string
		runs, ok bool
	}{
		{`s/a/b/`, false, true},
		{`s/a/b/g;s|x|y|2`, false, true},
		{`s/.*/date/e`, true, true},
		{`s/a/b/we.txt`, false, true},
		{`1e date`, true, true},
		{`/x/ e`, true, true},
		{`/x/!e`, true, true},
		{`$!N;P;D`, false, true},
		{"1i\\\nheader e", false, true},
		{`a text with e and ; e`, false, true},
		{`y/abc/xyz/`, false, true},
		{`/start/,/end/{ s/a\/b/c/; p }`, false, true},
		{`\%x%d`, false, true},
		{`0,/re/I s/a/b/`, false, true},
		{`1~2d`, false, true},
		{`:a;N;$!ba;s/\n/ /g`, false, true},
		{`s/a/b`, false, false},
		{`k`, false, false},
		{`s/a/b/ e`, false, false},
		{"# comment e\np", false, true},
		{`w out.txt`, false, true},
		{`q5`, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			runs, ok := sedRunsCommands(tt.script)
			if runs != tt.runs || ok != tt.ok {
				t.Errorf("sedRunsCommands(%q) = %v, %v; want %v, %v", tt.script, runs, ok, tt.runs, tt.ok)
			}
		})
	}
}

// shellBench is a realistic 100-line script using only allowed commands.
func shellBench() string {
	var sb strings.Builder
	sb.WriteString("#!/bin/bash\nset -euo pipefail\n")
	block := `# summarize the files in a directory
summarize() {
	local dir="$1"
	local total=0
	for f in "$dir"/*.txt; do
		[ -f "$f" ] || continue
		n=$(wc -l < "$f")
		total=$((total + n))
		echo "$f: $n lines"
	done
	echo "total: $total"
}
summarize data | sort -k2 -n | tail -5
grep -rn "TODO" src | awk -F: '{ print $1 }' | sort | head -20
cat report.txt | sed -e 's/foo/bar/g' -e '/^#/d' | wc -l
if [[ -n "${VERBOSE:-}" ]]; then
	ls -la "$(pwd)" | grep -v '^total' | head -n 3
fi
case "${MODE:-fast}" in
	fast) echo "fast mode" ;;
	*) printf '%s\n' "slow mode" ;;
esac
`
	for strings.Count(sb.String(), "\n") < 100 {
		sb.WriteString(block)
	}
	return sb.String()
}

func TestShellBenchScriptPasses(t *testing.T) {
	s := shellBench()
	if n := strings.Count(s, "\n"); n < 100 || n > 130 {
		t.Fatalf("bench script has %d lines", n)
	}
	if vs := CheckShell(s, allowRules); vs != nil {
		t.Fatalf("bench script must pass, got %+v", vs)
	}
}

func BenchmarkCheckShell100Lines(b *testing.B) {
	s := shellBench()
	b.ReportAllocs()
	for b.Loop() {
		CheckShell(s, allowRules)
	}
}

// TestCheckShellLarge feeds shapes that would be quadratic (or worse) if the
// checker rescanned: long chains of functions, many -exec actions, many wrappers,
// long words of globs and braces. Each must stay fast.
func TestCheckShellLarge(t *testing.T) {
	var chain, calls strings.Builder
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&chain, "f%d() { f%d; curl; }\nf%d\n", i+1, i, i+1)
	}
	calls.WriteString("main() { a; b; c; }\n")
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&calls, "x%d() { :; }\nmain\n", i)
	}
	tests := map[string]string{
		"function chain":  chain.String(),
		"function calls":  calls.String(),
		"find actions":    "find . " + strings.Repeat("-exec x {} ", 10000) + ";",
		"brackets":        "echo " + strings.Repeat("[", 100000),
		"braces":          "echo " + strings.Repeat("{a", 50000),
		"wrappers":        strings.Repeat("env ", 20000) + "curl",
		"nested bash -c":  "bash -c '" + strings.Repeat("bash -c ", 100) + "'",
		"lines":           strings.Repeat("ls -la | grep x | sort\n", 10000),
		"awk divisions":   "awk '" + strings.Repeat("/a/ / ", 20000) + "'",
		"sed commands":    "sed '" + strings.Repeat("s/a/b/;", 20000) + "'",
		"many arguments":  "ls " + strings.Repeat("a ", 100000),
		"long identifier": "awk '" + strings.Repeat("F", 100000) + "'",
	}
	for name, script := range tests {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			CheckShell(script, denyRules)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// BenchmarkShellParseOnly is the parser's share of BenchmarkCheckShell100Lines.
func BenchmarkShellParseOnly(b *testing.B) {
	s := shellBench()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(s), ""); err != nil {
			b.Fatal(err)
		}
	}
}
