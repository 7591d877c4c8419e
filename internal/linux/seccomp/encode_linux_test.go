//go:build linux && (amd64 || arm64)

package seccomp

import (
	"reflect"
	"testing"
)

func TestEncodedRoundTrip(t *testing.T) {
	b, err := Encoded()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := compile()
	if !reflect.DeepEqual(got, c.filters) {
		t.Fatal("decode(Encoded()) differs from the assembled filters")
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	good, err := Encoded()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":             nil,
		"short header":      {1, 0},
		"zero instructions": {0, 0, 0, 0},
		"truncated body":    good[:len(good)-3],
		"huge count":        {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := decode(b); err == nil {
				t.Fatal("decode accepted malformed input")
			}
		})
	}
}
