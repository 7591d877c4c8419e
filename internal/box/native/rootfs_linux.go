package native

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
)

// stage is where the new root is assembled, inside the box's private mount namespace:
// a tmpfs mounted over the host's /tmp there. Nothing is created on the host.
const stage = "/tmp"

// boxUID and boxGID are the code's ids inside the box.
const (
	boxUID = 65534
	boxGID = 65534
)

// hostTrees are the host's runtime trees made visible read-only. Symlinks (merged /usr)
// are recreated as symlinks.
var hostTrees = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEtc are the only entries of the host's /etc in the box: what the dynamic loader
// needs, the alternatives symlinks /usr/bin points into, the time zone, matplotlibrc
// (Debian keeps matplotlib's defaults there) and fontconfig's configuration (without
// it matplotlib's font lookup prints an error to the code's stderr).
var hostEtc = []string{"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "matplotlibrc", "fonts"}

// devices are bind-mounted from the host's /dev; nothing else of /dev exists in the box.
var devices = []string{"null", "zero", "full", "random", "urandom"}

// procMasked are hidden behind an empty file; procReadOnly are made read-only
// (the same lists as Docker's defaults, trimmed to what exists on kernels we support).
var (
	procMasked   = []string{"kcore", "keys", "timer_list", "sysrq-trigger", "latency_stats", "sched_debug", "kallsyms"}
	procReadOnly = []string{"sys", "irq", "bus", "fs", "acpi", "scsi"}
)

const (
	passwd = "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:65534:65534:sandbox:/workspace:/bin/bash\n"
	group  = "root:x:0:\nsandbox:x:65534:\n"
	hosts  = "127.0.0.1\tlocalhost moat\n::1\tlocalhost ip6-localhost ip6-loopback\n"
)

// mountRootfs builds the box's root under stage. Preconditions: must be called in a
// fresh mount namespace owned by the box's user namespace, with the OS thread locked.
func mountRootfs(s *initSpec) error {
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if err := mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=8m,nr_inodes=8192"); err != nil {
		return err
	}
	for _, t := range hostTrees {
		if err := exposeHostPath(t, stage+t); err != nil {
			return err
		}
	}
	if err := makeEtc(s.EgressFD != 0); err != nil {
		return err
	}
	if err := makeDev(s); err != nil {
		return err
	}
	if err := makeProc(s.UserLimits); err != nil {
		return err
	}
	if err := mkdirMount("tmpfs", stage+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%d", s.TmpBytes)); err != nil {
		return err
	}
	wsOpts := fmt.Sprintf("mode=0755,size=%d,uid=%d,gid=%d", s.DiskBytes, boxUID, boxGID)
	if s.Rootless {
		// 65534 is not mapped here; the owner, init's uid, is 65534 in the code's nested
		// user namespace.
		wsOpts = fmt.Sprintf("mode=0755,size=%d", s.DiskBytes)
	}
	if err := mkdirMount("tmpfs", stage+box.WorkspaceDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, wsOpts); err != nil {
		return err
	}
	if err := writeCode(s, stage); err != nil {
		return err
	}
	return maskHostExe(s.HostExe)
}

// exposeHostPath recreates host path src at dst: a symlink as the same symlink, a
// directory as a read-only, nosuid, nodev bind mount. A missing src is skipped.
func exposeHostPath(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if fi.IsDir() {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	} else if err := touch(dst); err != nil {
		return err
	}
	return bindReadOnly(src, dst)
}

func bindReadOnly(src, dst string) error {
	if err := mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return setattr(dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// setattr adds mount attributes recursively (mount_setattr, Linux 5.12), falling back to
// a remount of the top mount on older kernels.
func setattr(path string, attrs uint64) error {
	err := unix.MountSetattr(-1, path, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attrs})
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return &os.PathError{Op: "mount_setattr", Path: path, Err: err}
	}
	var flags uintptr = unix.MS_REMOUNT | unix.MS_BIND
	if attrs&unix.MOUNT_ATTR_RDONLY != 0 {
		flags |= unix.MS_RDONLY
	}
	if attrs&unix.MOUNT_ATTR_NOSUID != 0 {
		flags |= unix.MS_NOSUID
	}
	if attrs&unix.MOUNT_ATTR_NODEV != 0 {
		flags |= unix.MS_NODEV
	}
	if attrs&unix.MOUNT_ATTR_NOEXEC != 0 {
		flags |= unix.MS_NOEXEC
	}
	// The remount must keep the flags the host mount has locked (e.g. nosuid).
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err == nil {
		flags |= uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY | unix.MS_NOATIME | unix.MS_RELATIME)
	}
	return mount("", path, "", flags, "")
}

// makeEtc writes the box's /etc. With egress, names resolve through the box's own
// DNS socket, which the egress proxy answers.
func makeEtc(egress bool) error {
	etc := stage + "/etc"
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	for name, content := range BoxEtc(egress) {
		if err := os.WriteFile(etc+"/"+name, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, name := range hostEtc {
		if err := exposeHostPath("/etc/"+name, etc+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

// BoxEtc returns the files moat writes into a box's /etc (name to content); the
// entries of HostEtc come from the host. With egress, names resolve through the box's
// own DNS socket, which the egress proxy answers.
func BoxEtc(egress bool) map[string]string {
	resolv, nss := "", "passwd: files\ngroup: files\nhosts: files\n"
	if egress {
		resolv = "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n"
		nss = "passwd: files\ngroup: files\nhosts: files dns\n"
	}
	return map[string]string{
		"passwd":        passwd,
		"group":         group,
		"hosts":         hosts,
		"hostname":      "moat\n",
		"resolv.conf":   resolv,
		"nsswitch.conf": nss,
	}
}

// HostTrees returns the host's runtime trees a box sees read-only (a symlink, as on a
// merged-/usr host, is recreated as the same symlink); HostEtc the entries of the
// host's /etc it sees. Other backends that show a box the host's interpreters (gvisor)
// use the same lists.
func HostTrees() []string { return slices.Clone(hostTrees) }

// HostEtc: see HostTrees.
func HostEtc() []string { return slices.Clone(hostEtc) }

func makeDev(s *initSpec) error {
	dev := stage + "/dev"
	if err := mkdirMount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return err
	}
	for _, d := range devices {
		if err := touch(dev + "/" + d); err != nil {
			return err
		}
		if err := mount("/dev/"+d, dev+"/"+d, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		if err := setattr(dev+"/"+d, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	shmOpts := fmt.Sprintf("mode=1777,size=%d", s.TmpBytes)
	if err := mkdirMount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, shmOpts); err != nil {
		return err
	}
	// Nothing may be created in /dev afterwards.
	return mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64")
}

// makeProc mounts the box's /proc, masked and read-only where it must be. Before
// /proc/sys is made read-only, it writes userLimits to /proc/sys/user: the limits of
// init's user namespace, the box's (init, its root, may).
func makeProc(userLimits map[string]int64) error {
	proc := stage + "/proc"
	if err := mkdirMount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for name, v := range userLimits {
		err := os.WriteFile(proc+"/sys/user/"+name, []byte(strconv.FormatInt(v, 10)), 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set the box's user namespace limit %s: %w", name, err)
		}
	}
	for _, p := range procMasked {
		target := proc + "/" + p
		if _, err := os.Lstat(target); err != nil {
			continue
		}
		if err := mount(stage+"/dev/null", target, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for _, p := range procReadOnly {
		target := proc + "/" + p
		if _, err := os.Lstat(target); err != nil {
			continue
		}
		if err := mount(target, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := setattr(target, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	return nil
}

// writeCode places the code and the engine's support files under root+"/.moat": in a
// native box, the root tmpfs that becomes read-only at pivot_root; in a contained one
// (root ""), the tmpfs the runtime mounted there.
func writeCode(s *initSpec, root string) error {
	files := s.Support
	if s.CodePath != "" { // a session has no code of its own
		files = append([]box.SupportFile{{Path: s.CodePath, Data: s.Code}}, files...)
	}
	for _, f := range files {
		if !strings.HasPrefix(f.Path, "/.moat/") || strings.Contains(f.Path, "..") {
			return fmt.Errorf("support file %q is not under /.moat", f.Path)
		}
		if err := os.MkdirAll(root+filepath.Dir(f.Path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(root+f.Path, f.Data, 0o444); err != nil {
			return err
		}
	}
	return nil
}

// copyFiles copies the caller's files (passed as fds) into the fresh workspace, after
// pivot_root and once init is in the box's cgroup (so the pages are charged to the box).
// The workspace holds nothing the code made yet, and every Dest was cleaned by the
// parent (box.CleanDest), so no path component can be a symlink planted by the code.
func copyFiles(s *initSpec) error {
	ws := box.WorkspaceDir
	for _, f := range s.Files {
		src := os.NewFile(uintptr(f.FD), "file")
		if err := copyFile(src, ws, f.Dest, s.codeAsBoxUser()); err != nil {
			src.Close()
			return fmt.Errorf("copy file to %s: %w", f.Dest, err)
		}
		src.Close()
	}
	return nil
}

func copyFile(src *os.File, ws, dest string, chown bool) error {
	dst := filepath.Join(ws, dest)
	if !strings.HasPrefix(dst, ws+"/") {
		return fmt.Errorf("destination escapes the workspace")
	}
	for d := filepath.Dir(dst); chown && d != ws; d = filepath.Dir(d) {
		defer os.Lchown(d, boxUID, boxGID) //nolint:errcheck // best effort ownership of created dirs
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	if chown {
		if err := out.Chown(boxUID, boxGID); err != nil {
			out.Close()
			return err
		}
	}
	return out.Close()
}

// maskHostExe hides the moat binary behind an empty read-only file when one of the
// bound host trees contains it (e.g. /usr/local/bin/moat).
func maskHostExe(hostExe string) error {
	if hostExe == "" {
		return nil
	}
	inBox := stage + hostExe
	if _, err := os.Stat(inBox); err != nil {
		return nil //nolint:nilerr // not visible in the box: nothing to mask
	}
	empty := stage + "/.moat/empty"
	if err := os.WriteFile(empty, nil, 0o444); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return mount(empty, inBox, "", unix.MS_BIND, "")
}

// pivotRoot makes stage the root and detaches the host's root from the box's mount
// namespace entirely (pivot_root(".", ".") then a lazy unmount of the old root).
func pivotRoot() error {
	if err := unix.Chdir(stage); err != nil {
		return &os.PathError{Op: "chdir", Path: stage, Err: err}
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return os.NewSyscallError("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return os.NewSyscallError("umount old root", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return &os.PathError{Op: "chdir", Path: "/", Err: err}
	}
	// The root tmpfs itself becomes read-only: only /tmp, /workspace and /dev/shm are
	// writable mounts.
	return mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=8m,nr_inodes=8192")
}

func mkdirMount(src, dst, fstype string, flags uintptr, data string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	return mount(src, dst, fstype, flags, data)
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
	}
	return nil
}

func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
