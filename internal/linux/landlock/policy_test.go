package landlock

import (
	"fmt"
	"testing"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

func TestPolicy(t *testing.T) {
	// What no rule may ever grant (see doc.go, "Rights deliberately
	// withheld").
	const withheld = ll.AccessFSMakeChar | ll.AccessFSMakeBlock | ll.AccessFSIoctlDev
	// rwV1 is rwDirAccess without the rights V1 does not know.
	const rwV1 = rwDirAccess &^ (ll.AccessFSRefer | ll.AccessFSTruncate)

	presets := []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7}
	tests := []struct {
		abi                         int
		root, rwDir, devRW, connect uint64
	}{
		{1, rootAccess, rwV1, ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSWriteFile, 0},
		{2, rootAccess, rwV1 | ll.AccessFSRefer, ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSWriteFile, 0},
		{3, rootAccess, rwDirAccess, devRWAccess, 0},
		{4, rootAccess, rwDirAccess, devRWAccess, ll.AccessNetConnectTCP},
		{5, rootAccess, rwDirAccess, devRWAccess, ll.AccessNetConnectTCP},
		{6, rootAccess, rwDirAccess, devRWAccess, ll.AccessNetConnectTCP},
		{7, rootAccess, rwDirAccess, devRWAccess, ll.AccessNetConnectTCP},
	}
	if len(tests) != pinnedABI {
		t.Fatalf("the table covers ABI 1 to %d, pinnedABI is %d", len(tests), pinnedABI)
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("V%d", tt.abi), func(t *testing.T) {
			p := policyFor(tt.abi)
			// Handling what go-landlock's preset handles is what its
			// best-effort mode did before Restrict built rulesets itself.
			preset := presets[tt.abi-1]
			want := ll.RulesetAttr{
				HandledAccessFS:  uint64(preset.HandledAccessFS),
				HandledAccessNet: uint64(preset.HandledAccessNet),
				Scoped:           uint64(preset.Scoped),
			}
			if p.handled != want {
				t.Errorf("handled = %+v, want go-landlock's V%d preset %+v", p.handled, tt.abi, want)
			}
			grants := []struct {
				name      string
				got, want uint64
			}{
				{"root", p.root, tt.root},
				{"rwDir", p.rwDir, tt.rwDir},
				{"devRW", p.devRW, tt.devRW},
			}
			for _, g := range grants {
				if g.got != g.want {
					t.Errorf("%s = %#x, want %#x", g.name, g.got, g.want)
				}
				if g.got&^p.handled.HandledAccessFS != 0 {
					t.Errorf("%s = %#x grants rights the ruleset does not handle (%#x)", g.name, g.got, p.handled.HandledAccessFS)
				}
				if g.got&withheld != 0 {
					t.Errorf("%s = %#x grants mknod of devices or ioctl on them", g.name, g.got)
				}
			}
			if p.connect != tt.connect {
				t.Errorf("connect = %#x, want %#x", p.connect, tt.connect)
			}
			for k, want := range map[pathKind]uint64{rootPath: tt.root, rwPath: tt.rwDir, devRWPath: tt.devRW} {
				if got := p.grant(k); got != want {
					t.Errorf("grant(%v) = %#x, want %#x", k, got, want)
				}
			}
		})
	}
}
