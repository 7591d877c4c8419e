package box

import (
	"strings"
	"testing"
)

func TestCheckCode(t *testing.T) {
	tests := []struct {
		name    string
		code    string
		wantErr string
	}{
		{"ok", "print(1)\n", ""},
		{"unicode", "print('héllo 世界')", ""},
		{"empty", "", "empty"},
		{"blank", " \n\t ", "empty"},
		{"nul byte", "print(1)\x00", "binary"},
		{"invalid utf8", "print('\xff\xfe')", "UTF-8"},
		{"too large", strings.Repeat("#", MaxCodeBytes+1), "over the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCode([]byte(tc.code))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckCode: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckCode error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCleanDest(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"data.csv", "data.csv", true},
		{"a/b/../c.txt", "a/c.txt", true},
		{"/workspace/in/x.py", "in/x.py", true},
		{"../etc/passwd", "", false},
		{"a/../../x", "", false},
		{"/etc/passwd", "", false},
		{"/workspace", "", false},
		{"/workspace/../etc", "", false},
		{".", "", false},
		{"", "", false},
		{"a\x00b", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := CleanDest(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("CleanDest(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestCheckEnvAndMerge(t *testing.T) {
	for _, bad := range []string{"NOEQUALS", "=v", "1A=b", "A-B=c", "A=b\x00c"} {
		if CheckEnv(bad) == nil {
			t.Errorf("CheckEnv(%q) accepted", bad)
		}
	}
	if err := CheckEnv("MY_VAR=a=b c"); err != nil {
		t.Errorf("CheckEnv rejected a valid pair: %v", err)
	}
	env := MergeEnv([]string{"HOME=/x", "NEW=1"})
	got := strings.Join(env, "\n")
	if !strings.Contains(got, "HOME=/x") || strings.Contains(got, "HOME=/workspace") || !strings.Contains(got, "NEW=1") {
		t.Fatalf("MergeEnv did not override: %v", env)
	}
}

func TestLanguageForFile(t *testing.T) {
	for file, want := range map[string]string{"a.py": "python", "b.sh": "bash", "C.PY": "python", "x.bash": "bash"} {
		l, err := LanguageForFile(file)
		if err != nil || l.Name != want {
			t.Errorf("LanguageForFile(%q) = %q, %v; want %q", file, l.Name, err, want)
		}
	}
	if _, err := LanguageForFile("x.rb"); err == nil {
		t.Error("LanguageForFile accepted .rb")
	}
}
