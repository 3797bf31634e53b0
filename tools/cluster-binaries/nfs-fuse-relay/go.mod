// nfs-fuse-relay (main.go says what it is): the FUSE library github.com/hanwen/go-fuse/v2 and the
// NFSv3 client github.com/willscott/go-nfs-client (a maintained fork of vmware/go-nfs-client,
// which the module proxy no longer serves: 403), read from proxy.golang.org on 2026-11-28.
// Known wrong: go-nfs-client has no tagged release (a pseudo-version of its main branch) and its
// AUTH_SYS carries one supplementary group.
module trainium-cluster/nfs-fuse-relay

go 1.26.0

tool trainium-cluster/nfs-fuse-relay

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/willscott/go-nfs-client v0.0.0-20251022144359-801f10d98886
)

require (
	github.com/rasky/go-xdr v0.0.0-20170124162913-1a41d1a06c93 // indirect
	golang.org/x/sys v0.28.0 // indirect
)
