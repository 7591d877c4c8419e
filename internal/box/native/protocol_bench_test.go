package native

import (
	"bytes"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/box"
)

// benchSpec is the first frame of a typical Python box: 1 KiB of code, the policy
// document and a compiled runner of about the real one's size.
func benchSpec() *initSpec {
	return &initSpec{
		Argv:     []string{"/usr/bin/python3", "-u", "-I", "/.moat/runner.pyc", "--policy", "/.moat/policy.json", "/workspace/main.py"},
		Env:      []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8", "MPLBACKEND=Agg", "PYTHONDONTWRITEBYTECODE=1"},
		Code:     []byte(strings.Repeat("print(sum(i * i for i in range(100)))\n", 27)),
		CodePath: "/workspace/main.py",
		Support: []box.SupportFile{
			{Path: "/.moat/policy.json", Data: bytes.Repeat([]byte(`{"mode":"denylist","deny_modules":["ctypes"]}`), 40)},
			{Path: "/.moat/runner.pyc", Data: bytes.Repeat([]byte{0xe3, 0x00, 0x17, 0x42}, 30<<10)},
		},
		ReportFD: 5, TmpBytes: 64 << 20, DiskBytes: 100 << 20, Pids: 64, OpenFiles: 256, CPUSecs: 30,
		HostExe: "/usr/local/bin/moat", Seccomp: bytes.Repeat([]byte{0x15, 0, 0, 1}, 600),
	}
}

// BenchmarkSpecFrame encodes (the parent) and decodes (init) the spec frame a box
// starts with; the support files travel base64-encoded in its JSON.
func BenchmarkSpecFrame(b *testing.B) {
	spec := benchSpec()
	var frame bytes.Buffer
	if err := writeFrame(&frame, spec); err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(frame.Len()))
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := writeFrame(&buf, spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(frame.Len()))
		for b.Loop() {
			var got initSpec
			if err := readFrame(bytes.NewReader(frame.Bytes()), maxSpecFrame, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAgentRoundTrip is one session request and its answer, as the parent and
// init exchange them for a file operation.
func BenchmarkAgentRoundTrip(b *testing.B) {
	req := agentReq{Op: opGet, Path: "/workspace/out/result.csv", Max: 64 << 20}
	msg := agentMsg{Kind: "file", Size: 12345}
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := writeFrame(&buf, req); err != nil {
			b.Fatal(err)
		}
		var r agentReq
		if err := readFrame(&buf, maxAgentFrame, &r); err != nil {
			b.Fatal(err)
		}
		if err := writeFrame(&buf, msg); err != nil {
			b.Fatal(err)
		}
		var m agentMsg
		if _, _, err := readAny(&buf, maxAgentFrame, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDataChunks streams 4 MiB of file data as maximal chunks.
func BenchmarkDataChunks(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), maxChunk/16)
	const chunks = 16
	var buf bytes.Buffer
	b.SetBytes(chunks * maxChunk)
	for b.Loop() {
		buf.Reset()
		for range chunks {
			if err := writeChunk(&buf, data); err != nil {
				b.Fatal(err)
			}
			got, isChunk, err := readAny(&buf, maxAgentFrame, nil)
			if err != nil || !isChunk || len(got) != maxChunk {
				b.Fatalf("chunk: %v, %v, %d bytes", err, isChunk, len(got))
			}
		}
	}
}
