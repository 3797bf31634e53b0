// nfs-fuse-relay: a FUSE file system that relays every call to an NFSv3 server, written here for
// the real-node tier of tests/cluster (this machine's kernel has FUSE but no NFS client). It is a
// relay, not a file server: it keeps no permission rules of its own and mounts without
// default_permissions, so the kernel checks nothing either. Each FUSE request is sent to the server
// as AUTH_SYS with the calling process's uid, gid and first supplementary group, and the SERVER
// (nfs-ganesha with root squash, tests/cluster/nfs_server.py) decides: uid 0 is squashed to the
// anonymous uid there, and the permission bits of the exported directories are checked there.
//
// What differs from a kernel NFS client: one supplementary group is forwarded (AUTH_SYS carries 16;
// the client library carries one); no attribute or data cache (every call goes to the server); no
// locks, symlink creation, hard links or special files (ENOSYS); a file's data is read and written
// per call, committed at each write.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

type creds struct{ uid, gid, group uint32 }

// relay holds one NFS session per caller identity, each mounted with that identity's AUTH_SYS.
type relay struct {
	server           string
	nfsPort, mntPort int
	export           string
	mu               sync.Mutex
	targets          map[creds]*nfs.Target
}

func (r *relay) target(ctx context.Context) (*nfs.Target, syscall.Errno) {
	c := creds{}
	if caller, ok := fuse.FromContext(ctx); ok {
		c = creds{caller.Uid, caller.Gid, firstGroup(caller.Pid, caller.Gid)}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.targets[c]; ok {
		return t, 0
	}
	auth := rpc.NewAuthUnix("nfs-fuse-relay", c.uid, c.gid)
	auth.Gids = c.group
	fh, err := r.mount(auth.Auth())
	if err != nil {
		log.Printf("mount %s as %d:%d: %v", r.export, c.uid, c.gid, err)
		return nil, syscall.EACCES
	}
	nc, err := nfs.DialServiceAtPort(r.server, r.nfsPort)
	if err != nil {
		return nil, syscall.EIO
	}
	t, err := nfs.NewTargetWithClient(nc, auth.Auth(), fh, r.export, time.Second)
	if err != nil {
		return nil, errno(err)
	}
	r.targets[c] = t
	return t, 0
}

// mount asks the server's MOUNT service for the export's file handle (MOUNTPROC3_MNT, RFC 1813
// appendix I), dialled at its port so no portmapper is needed.
func (r *relay) mount(auth rpc.Auth) ([]byte, error) {
	mc, err := nfs.DialServiceAtPort(r.server, r.mntPort)
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	type mnt struct {
		rpc.Header
		Dirpath string
	}
	res, err := mc.Call(&mnt{rpc.Header{
		Rpcvers: 2, Prog: nfs.MountProg, Vers: nfs.MountVers, Proc: nfs.MountProc3MNT, Cred: auth, Verf: rpc.AuthNull,
	}, r.export})
	if err != nil {
		return nil, err
	}
	status, err := xdr.ReadUint32(res)
	if err != nil || status != nfs.MNT3Ok {
		return nil, fmt.Errorf("MNT status %d (%v)", status, err)
	}
	return xdr.ReadOpaque(res)
}

// firstGroup reads the caller's first supplementary group from /proc (FUSE passes only uid, gid).
func firstGroup(pid uint32, gid uint32) uint32 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return gid
	}
	for _, line := range strings.Split(string(status), "\n") {
		if fields := strings.Fields(line); len(fields) > 1 && fields[0] == "Groups:" {
			if g, err := strconv.ParseUint(fields[1], 10, 32); err == nil {
				return uint32(g)
			}
		}
	}
	return gid
}

func errno(err error) syscall.Errno {
	var nfsErr *nfs.Error
	switch {
	case err == nil:
		return 0
	case errors.Is(err, os.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, os.ErrPermission):
		return syscall.EPERM
	case errors.Is(err, os.ErrExist):
		return syscall.EEXIST
	case errors.As(err, &nfsErr) && nfsErr.ErrorNum < 10000:
		return syscall.Errno(nfsErr.ErrorNum) // NFS3ERR_* below 10000 are the Unix errno values
	}
	log.Printf("unmapped NFS error: %v", err)
	return syscall.EIO
}

type node struct {
	fs.Inode
	r *relay
}

func (n *node) rel(name string) string { return path.Join(n.Path(n.Root()), name) }

func fill(a *nfs.Fattr, out *fuse.Attr) {
	out.Ino, out.Size, out.Nlink = a.Fileid, a.Filesize, a.Nlink
	out.Blocks = (a.Used + 511) / 512
	out.Mode = a.FileMode & 07777
	switch a.Type {
	case 2:
		out.Mode |= syscall.S_IFDIR
	case 5:
		out.Mode |= syscall.S_IFLNK
	default:
		out.Mode |= syscall.S_IFREG
	}
	out.Uid, out.Gid = a.UID, a.GID
	out.Mtime, out.Mtimensec = uint64(a.Mtime.Seconds), a.Mtime.Nseconds
	out.Ctime, out.Ctimensec = uint64(a.Ctime.Seconds), a.Ctime.Nseconds
	out.Atime, out.Atimensec = uint64(a.Atime.Seconds), a.Atime.Nseconds
}

func (n *node) child(ctx context.Context, t *nfs.Target, rel string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := t.Getattr(rel)
	if err != nil {
		return nil, errno(err)
	}
	fill(a, &out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	return n.NewInode(ctx, &node{r: n.r}, fs.StableAttr{Mode: out.Attr.Mode & syscall.S_IFMT, Ino: a.Fileid}), 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, e := n.r.target(ctx)
	if e != 0 {
		return nil, e
	}
	return n.child(ctx, t, n.rel(name), out)
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	t, e := n.r.target(ctx)
	if e != 0 {
		return e
	}
	a, err := t.Getattr(n.rel(""))
	if err != nil {
		return errno(err)
	}
	fill(a, &out.Attr)
	out.SetTimeout(0)
	return 0
}

func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	t, e := n.r.target(ctx)
	if e != 0 {
		return e
	}
	var s nfs.Sattr3
	if m, ok := in.GetMode(); ok {
		s.Mode = nfs.SetMode{SetIt: true, Mode: m & 07777}
	}
	if u, ok := in.GetUID(); ok {
		s.UID = nfs.SetUID{SetIt: true, UID: u}
	}
	if g, ok := in.GetGID(); ok {
		s.GID = nfs.SetUID{SetIt: true, UID: g}
	}
	if size, ok := in.GetSize(); ok {
		s.Size = nfs.SetSize{SetIt: true, Size: size}
	}
	if err := t.Setattr(n.rel(""), s); err != nil {
		return errno(err)
	}
	return n.Getattr(ctx, nil, out)
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	t, e := n.r.target(ctx)
	if e != 0 {
		return nil, e
	}
	entries, err := t.ReadDirPlus(n.rel(""))
	if err != nil {
		return nil, errno(err)
	}
	list := make([]fuse.DirEntry, 0, len(entries))
	for _, entry := range entries {
		if entry.FileName == "." || entry.FileName == ".." {
			continue
		}
		mode := uint32(syscall.S_IFREG)
		if entry.IsDir() {
			mode = syscall.S_IFDIR
		}
		list = append(list, fuse.DirEntry{Name: entry.FileName, Ino: entry.FileId, Mode: mode})
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, e := n.r.target(ctx)
	if e != 0 {
		return nil, e
	}
	if _, err := t.Mkdir(n.rel(name), os.FileMode(mode&07777)); err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, t, n.rel(name), out)
}

func (n *node) Create(ctx context.Context, name string, _ uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	t, e := n.r.target(ctx)
	if e != 0 {
		return nil, nil, 0, e
	}
	if _, err := t.Create(n.rel(name), os.FileMode(mode&07777)); err != nil {
		return nil, nil, 0, errno(err)
	}
	inode, e := n.child(ctx, t, n.rel(name), out)
	return inode, nil, fuse.FOPEN_DIRECT_IO, e
}

// Open asks the server's ACCESS for what the flags need, as a kernel NFS client does on open(2).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	t, e := n.r.target(ctx)
	if e != 0 {
		return nil, 0, e
	}
	want := uint32(nfs.ACCESS3_READ)
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		want = nfs.ACCESS3_MODIFY
	case syscall.O_RDWR:
		want |= nfs.ACCESS3_MODIFY
	}
	got, err := t.Access(n.rel(""), want)
	if err != nil {
		return nil, 0, errno(err)
	}
	if got&want != want {
		return nil, 0, syscall.EACCES
	}
	if flags&syscall.O_TRUNC != 0 {
		if err := t.Setattr(n.rel(""), nfs.Sattr3{Size: nfs.SetSize{SetIt: true, Size: 0}}); err != nil {
			return nil, 0, errno(err)
		}
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	t, e := n.r.target(ctx)
	if e != 0 {
		return nil, e
	}
	f, err := t.Open(n.rel(""))
	if err != nil {
		return nil, errno(err)
	}
	got, err := f.ReadAt(dest, off)
	if err != nil && got == 0 && !errors.Is(err, io.EOF) {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (n *node) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	t, e := n.r.target(ctx)
	if e != 0 {
		return 0, e
	}
	f, err := t.Open(n.rel(""))
	if err != nil {
		return 0, errno(err)
	}
	if _, err := f.Seek(off, 0); err != nil {
		return 0, syscall.EINVAL
	}
	written, err := f.Write(data)
	if err != nil {
		return uint32(written), errno(err)
	}
	return uint32(written), errno(f.Close())
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	t, e := n.r.target(ctx)
	if e != 0 {
		return e
	}
	return errno(t.Remove(n.rel(name)))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	t, e := n.r.target(ctx)
	if e != 0 {
		return e
	}
	return errno(t.RmDir(n.rel(name)))
}

func (n *node) Rename(ctx context.Context, name string, parent fs.InodeEmbedder, newName string, _ uint32) syscall.Errno {
	t, e := n.r.target(ctx)
	if e != 0 {
		return e
	}
	to := path.Join(parent.EmbeddedInode().Path(n.Root()), newName)
	return errno(t.Rename(n.rel(name), to))
}

func main() {
	r := &relay{targets: map[creds]*nfs.Target{}}
	flag.StringVar(&r.server, "server", "127.0.0.1", "NFS server address")
	flag.IntVar(&r.nfsPort, "nfs-port", 2049, "the server's NFS port")
	flag.IntVar(&r.mntPort, "mount-port", 20048, "the server's MOUNT port")
	flag.StringVar(&r.export, "export", "/", "the export's path on the server")
	mountpoint := flag.String("mountpoint", "", "where to mount")
	flag.Parse()
	zero := time.Duration(0)
	server, err := fs.Mount(*mountpoint, &node{r: r}, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		// DirectMount: the mount(2) call itself (the relay runs as root), no fusermount helper.
		MountOptions: fuse.MountOptions{AllowOther: true, DirectMount: true, FsName: r.server + ":" + r.export, Name: "nfs-relay"},
	})
	if err != nil {
		log.Fatalf("mount %s: %v", *mountpoint, err)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-signals; _ = server.Unmount() }()
	log.Printf("serving %s:%s at %s", r.server, r.export, *mountpoint)
	server.Wait()
}
