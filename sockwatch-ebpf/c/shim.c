// CO-RE accessors for every kernel-struct read sockwatch makes.
//
// Rust cannot emit CO-RE relocations, so the programs call these functions instead of reading
// fields themselves. Every field access below goes through preserve_access_index (vmlinux.h
// applies it to all records) and is relocated by the loader against the target kernel's BTF.
// Functions return a negative value, 0 or NULL when the object is not what they look for, so
// callers filter cheaply before touching the ring buffer.
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "shim.h"

#define SW_AF_UNIX 1
#define SW_S_IFMT 00170000
#define SW_S_IFSOCK 0140000
#define SW_SOCKFS_MAGIC 0x534F434B
#define SW_TCP_LISTEN 10
#define SW_AT_FDCWD -100

// shim_basename_hash masks indexes into a path buffer.
_Static_assert((SW_PATH_CAP & (SW_PATH_CAP - 1)) == 0, "SW_PATH_CAP is a power of two");

long shim_file_refs(struct file *file);

// Kernel dev_t (major << 20 | minor) to the encoding stat(2) reports as st_dev.
static __always_inline __u64 sw_user_dev(__u32 kdev)
{
	__u64 major = kdev >> 20, minor = kdev & 0xfffff;
	return ((major & 0xfffff000ULL) << 32) | ((major & 0xfffULL) << 8) |
	       ((minor & 0xffffff00ULL) << 12) | (minor & 0xffULL);
}

static __always_inline int sw_inode_file(struct inode *inode, struct sw_file *out)
{
	if (!inode)
		return -1;
	out->ino = BPF_CORE_READ(inode, i_ino);
	out->dev = sw_user_dev(BPF_CORE_READ(inode, i_sb, s_dev));
	out->nlink = BPF_CORE_READ(inode, __i_nlink);
	out->mode = BPF_CORE_READ(inode, i_mode);
	out->sock_ino = 0;
	return 0;
}

// ---- sockets ----------------------------------------------------------------------------

struct sock *shim_socket_sk(struct socket *sock)
{
	return sock ? BPF_CORE_READ(sock, sk) : 0;
}

// The dentry a UNIX socket is bound to; NULL for other families, abstract and unnamed.
struct dentry *shim_sk_dentry(struct sock *sk)
{
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != SW_AF_UNIX)
		return 0;
	return BPF_CORE_READ((struct unix_sock *)sk, path.dentry);
}

// The socket's own sockfs inode. SOCK_INODE(): it sits next to the socket in struct
// socket_alloc.
__u64 shim_sk_sock_ino(struct sock *sk)
{
	struct socket *sock = BPF_CORE_READ(sk, sk_socket);
	if (!sock)
		return 0;
	struct socket_alloc *alloc = (void *)sock - bpf_core_field_offset(struct socket_alloc, socket);
	return BPF_CORE_READ(alloc, vfs_inode.i_ino);
}

// The file a UNIX socket is bound to (`dentry`, its shim_sk_dentry, which the caller has
// read already), with the socket's own sockfs inode. Its mode is not read: a bound socket's
// file is a socket.
int shim_sk_bound_file(struct sock *sk, struct dentry *dentry, struct sw_file *out)
{
	struct inode *inode = dentry ? BPF_CORE_READ(dentry, d_inode) : 0;
	if (!inode)
		return -1;
	out->ino = BPF_CORE_READ(inode, i_ino);
	out->dev = sw_user_dev(BPF_CORE_READ(inode, i_sb, s_dev));
	out->nlink = BPF_CORE_READ(inode, __i_nlink);
	out->mode = SW_S_IFSOCK;
	out->sock_ino = shim_sk_sock_ino(sk);
	return 0;
}

// The links to the inode behind a dentry; 0 for a negative dentry.
__u32 shim_dentry_nlink(struct dentry *dentry)
{
	return BPF_CORE_READ(dentry, d_inode, __i_nlink);
}

int shim_sk_listening(struct sock *sk)
{
	return BPF_CORE_READ(sk, __sk_common.skc_state) == SW_TCP_LISTEN;
}

int shim_sk_type(struct sock *sk)
{
	return BPF_CORE_READ(sk, sk_type);
}

// The socket behind a struct file, or NULL when the file is not in sockfs (an O_PATH
// descriptor of a socket file has the socket file's inode, not a socket).
struct sock *shim_file_sock(struct file *file)
{
	if (!file || BPF_CORE_READ(file, f_inode, i_sb, s_magic) != SW_SOCKFS_MAGIC)
		return 0;
	return shim_socket_sk(BPF_CORE_READ(file, private_data));
}

// Copies the bound sun_path; returns its length including the NUL.
int shim_sk_path(struct sock *sk, char *buf)
{
	struct unix_address *addr = BPF_CORE_READ((struct unix_sock *)sk, addr);
	if (!addr)
		return -1;
	// name[] is a flexible array: take its offset rather than index it (loaders reject a
	// relocation that indexes a zero-length array). sun_path follows the 2-byte family (uapi).
	const char *path = (const char *)addr + bpf_core_field_offset(struct unix_address, name) + 2;
	return bpf_probe_read_kernel_str(buf, SW_SUN_PATH_LEN, path);
}

// ---- files and directories --------------------------------------------------------------

// The inode behind a dentry; returns 0, or -1 for a negative dentry.
int shim_dentry_file(struct dentry *dentry, struct sw_file *out)
{
	return dentry ? sw_inode_file(BPF_CORE_READ(dentry, d_inode), out) : -1;
}

// Only the identity (device, inode) of the inode behind a dentry, into out->dev and out->ino:
// all the watch walk and an event's directory need, in half the reads of shim_dentry_file
// (each read is a helper call on the tracepoint tier).
int shim_dentry_id(struct dentry *dentry, struct sw_file *out)
{
	struct inode *inode = dentry ? BPF_CORE_READ(dentry, d_inode) : 0;
	if (!inode)
		return -1;
	out->ino = BPF_CORE_READ(inode, i_ino);
	out->dev = sw_user_dev(BPF_CORE_READ(inode, i_sb, s_dev));
	return 0;
}

// The identity of the directory behind `dentry`, and with `generation` its inode's generation
// too, the inode read once; returns 0, or -1 for a negative dentry.
int shim_dentry_key(struct dentry *dentry, struct sw_dir_key *out, int generation)
{
	struct inode *inode = dentry ? BPF_CORE_READ(dentry, d_inode) : 0;
	if (!inode)
		return -1;
	out->ino = BPF_CORE_READ(inode, i_ino);
	out->dev = sw_user_dev(BPF_CORE_READ(inode, i_sb, s_dev));
	out->generation = generation ? BPF_CORE_READ(inode, i_generation) : 0;
	return 0;
}

int shim_is_sock_mode(__u32 mode)
{
	return (mode & SW_S_IFMT) == SW_S_IFSOCK;
}

struct dentry *shim_dentry_parent(struct dentry *dentry)
{
	struct dentry *parent = BPF_CORE_READ(dentry, d_parent);
	return parent == dentry ? 0 : parent; // the root is its own parent
}

// Copies the dentry's own name into `buf` (SW_PATH_CAP bytes); returns its length with the NUL.
int shim_dentry_name(struct dentry *dentry, char *buf)
{
	const unsigned char *name = 0;
	BPF_CORE_READ_INTO(&name, dentry, d_name.name);
	return name ? bpf_probe_read_kernel_str(buf, SW_PATH_CAP, name) : -1;
}

// The same into half a path buffer (SW_PATH_CAP / 2 bytes): a rename's old name.
int shim_dentry_name_half(struct dentry *dentry, char *buf)
{
	const unsigned char *name = 0;
	BPF_CORE_READ_INTO(&name, dentry, d_name.name);
	return name ? bpf_probe_read_kernel_str(buf, SW_PATH_CAP / 2, name) : -1;
}

// sockwatch_common::name_hash: FNV-1a over the last SW_NAME_HASH_TAIL bytes of a name, last
// byte first, so an unlinked path's base name hashes in one bounded backward pass.
#define SW_FNV_OFFSET 0xcbf29ce484222325ULL
#define SW_FNV_PRIME 0x100000001b3ULL

static __always_inline __u64 sw_fnv(__u64 h, unsigned char c)
{
	return (h ^ c) * SW_FNV_PRIME;
}

// A global function (exported by the build), checked once by the verifier for any scalar
// where an inlined or static one was checked again at each call site and level of a walk.
__u64 sw_dentry_name_hash(__u64 of)
{
	struct dentry *dentry = (struct dentry *)of;
	// A fixed-size read that ends with the name: the verifier then sees only constant stack
	// offsets. Before a short inline name lie other fields of the same dentry.
	char buf[SW_NAME_HASH_TAIL] = {};
	const unsigned char *name = 0;
	__u32 len = 0;
	BPF_CORE_READ_INTO(&name, dentry, d_name.name);
	BPF_CORE_READ_INTO(&len, dentry, d_name.len);
	__u64 h = SW_FNV_OFFSET;
	if (!name || bpf_probe_read_kernel(buf, sizeof(buf), name + len - SW_NAME_HASH_TAIL))
		return h;
#pragma clang loop unroll(disable)
	for (int i = 0; i < SW_NAME_HASH_TAIL; i++) {
		if (i >= len)
			break;
		h = sw_fnv(h, buf[SW_NAME_HASH_TAIL - 1 - i]);
	}
	return h;
}

__u64 shim_dentry_name_hash(struct dentry *dentry)
{
	return sw_dentry_name_hash((__u64)dentry);
}

// sockwatch_common::name_hash of the last component of a path already copied into `buf` (map
// memory, SW_PATH_CAP bytes) whose length without the NUL is `len`.
__u64 shim_basename_hash(const char *buf, int len)
{
	__u64 h = SW_FNV_OFFSET;
#pragma clang loop unroll(disable)
	for (int i = 0; i < SW_NAME_HASH_TAIL; i++) {
		int at = len - 1 - i;
		if (at < 0)
			break;
		char c = buf[at & (SW_PATH_CAP - 1)];
		if (c == '/')
			break;
		h = sw_fnv(h, c);
	}
	return h;
}

// ---- the current task's descriptors -----------------------------------------------------

// The current task's descriptor table, or NULL.
static __always_inline struct fdtable *sw_current_fdt(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	return BPF_CORE_READ(task, files, fdt);
}

// The current task's descriptor table's slots and their number.
static __always_inline struct file **sw_current_fds(__u32 *max)
{
	struct fdtable *fdt = sw_current_fdt();
	if (!fdt)
		return 0;
	*max = BPF_CORE_READ(fdt, max_fds);
	return BPF_CORE_READ(fdt, fd);
}

// Slot `i` of a descriptor table: its open file, or NULL.
static __always_inline struct file *sw_fd_file(struct file **fds, __u32 i)
{
	struct file *file = 0;
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[i]))
		return 0;
	return file;
}

// Descriptor `fd` of the current task: its open file, or NULL.
static __always_inline struct file *sw_current_fd(int fd)
{
	__u32 max = 0;
	struct file **fds = sw_current_fds(&max);
	if (!fds || fd < 0 || (__u32)fd >= max)
		return 0;
	return sw_fd_file(fds, fd);
}

// `file` if it is a socket's, else NULL.
static __always_inline struct file *sw_socket_file(struct file *file)
{
	if (!file || !shim_is_sock_mode(BPF_CORE_READ(file, f_inode, i_mode)))
		return 0;
	return file;
}

// The struct file behind descriptor `fd` of the current task, if it is a socket.
struct file *shim_current_fd_file(int fd)
{
	return sw_socket_file(sw_current_fd(fd));
}

struct socket *shim_file_socket(struct file *file)
{
	return file ? BPF_CORE_READ(file, private_data) : 0;
}

// The struct socket behind descriptor `fd` of the current task, if it is a socket.
struct socket *shim_current_fd_socket(int fd)
{
	return shim_file_socket(shim_current_fd_file(fd));
}

// Descriptor `fd` of the current task, whatever file it is, the table reached through the
// typed current task: its pointers are loaded directly, not copied by a helper call each (a
// missing table loads as NULL). Needs bpf_get_current_task_btf (5.11).
static __always_inline struct file *sw_current_fd_btf(int fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = task->files->fdt;
	if (!fdt || fd < 0 || (__u32)fd >= fdt->max_fds)
		return 0;
	return sw_fd_file(fdt->fd, fd);
}

// shim_current_fd_file through the typed current task (5.11).
struct file *shim_current_fd_file_btf(int fd)
{
	return sw_socket_file(sw_current_fd_btf(fd));
}

// The same without the socket check, for a caller that checks only once the file matters
// (shim_is_socket_file): the check costs two reads.
struct file *shim_current_fd_any_file_btf(int fd)
{
	return sw_current_fd_btf(fd);
}

int shim_is_socket_file(struct file *file)
{
	return sw_socket_file(file) != 0;
}

// The inode a relative path starts from: descriptor `dirfd` of the current task, or its
// working directory for AT_FDCWD.
int shim_current_dirfd_file(int dirfd, struct sw_file *out)
{
	if (dirfd == SW_AT_FDCWD) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		return sw_inode_file(BPF_CORE_READ(task, fs, pwd.dentry, d_inode), out);
	}
	struct file *file = sw_current_fd(dirfd);
	return file ? sw_inode_file(BPF_CORE_READ(file, f_inode), out) : -1;
}

// ---- walks of the current task's descriptor table ----------------------------------------

// One walk and what its steps share.
struct sw_fd_walk {
	struct file **fds;
	unsigned long *open; // the table's open_fds: a slot whose bit is clear holds no file
	__u32 words; // bitmap words to look at
	__u64 sock_ino; // the socket the owner check looks for
	int found;
};

// A step of a walk at descriptor `i` of walk->fds; returns 1 to stop.
typedef long (*sw_fd_step)(__u64 i, void *walk);

// Finds the current task's descriptor table for a walk, into `walk`, and how many of its slots
// to look at into `max` (at most `cap`); 0 when it has none.
static __always_inline int sw_current_table(__u32 cap, struct sw_fd_walk *walk, __u32 *max)
{
	struct fdtable *fdt = sw_current_fdt();
	if (!fdt)
		return 0;
	*max = BPF_CORE_READ(fdt, max_fds);
	if (*max > cap)
		*max = cap;
	walk->words = (*max + 63) / 64;
	walk->fds = BPF_CORE_READ(fdt, fd);
	walk->open = BPF_CORE_READ(fdt, open_fds);
	return walk->fds && walk->open;
}

// Hands `step` each descriptor open in word `w` of the bitmap, bpf_loop's callback: one read
// per 64 slots, where reading every slot cost one per slot (an exiting process's table is
// mostly empty). Returns 1 when a step stopped the walk (bpf_loop's contract).
static __always_inline long sw_walk_word(sw_fd_step step, struct sw_fd_walk *walk, __u64 w)
{
	unsigned long bits = 0;
	if (bpf_probe_read_kernel(&bits, sizeof(bits), &walk->open[w]) || !bits)
		return 0;
#pragma clang loop unroll(disable)
	for (__u32 b = 0; b < 64; b++) {
		if (((bits >> b) & 1) && step(w * 64 + b, walk))
			return 1;
	}
	return 0;
}

// Runs `step` over the current task's descriptors: up to SW_FD_SCAN_MAX of them, only the
// open ones, a bitmap word at a time (`word`, sw_walk_word of `step`) with bpf_loop (5.17+);
// or, `bounded`, each of the first SW_FD_SCAN_BOUNDED slots in a constant-bounded loop (a
// bitmap test in that loop doubled the verifier's cost of the programs that walk twice).
// Returns 1 when a bounded walk left slots of a larger table unseen. Callers pass constants,
// so a bounded walk's code holds no bpf_loop call.
static __always_inline int sw_walk_current_fds(sw_fd_step word, sw_fd_step step,
						 struct sw_fd_walk *walk, int bounded)
{
	__u32 max = 0;
	if (!sw_current_table(bounded ? SW_FD_SCAN_BOUNDED + 1 : SW_FD_SCAN_MAX, walk, &max))
		return 0;
	if (!bounded) {
		bpf_loop(walk->words, word, walk, 0);
		return 0;
	}
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < SW_FD_SCAN_BOUNDED; i++) {
		if (i >= max)
			break;
		if (step(i, walk))
			return 0;
	}
	return max > SW_FD_SCAN_BOUNDED;
}

// Is descriptor `i` of `fds` the socket whose sockfs inode is `sock_ino`? A global function
// (exported by the build): the verifier checks it once, for any scalars, where a static one
// was checked again at each of the walk's 64 steps per bitmap word.
int sw_fd_is_socket(__u64 fds, __u32 i, __u64 sock_ino)
{
	struct file *file = sw_fd_file((struct file **)fds, i);
	if (!file)
		return 0;
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	return BPF_CORE_READ(inode, i_ino) == sock_ino &&
	       BPF_CORE_READ(inode, i_sb, s_magic) == SW_SOCKFS_MAGIC;
}

// Steps are inlined into their word's loop, bpf_loop's callback, and into the bounded loop
// (the walk then stays in registers).
static __always_inline long sw_holds_step(__u64 i, void *data)
{
	struct sw_fd_walk *walk = data;
	if (!sw_fd_is_socket((__u64)walk->fds, i, walk->sock_ino))
		return 0;
	walk->found = 1;
	return 1;
}

static long sw_holds_word(__u64 w, void *data)
{
	return sw_walk_word(sw_holds_step, data, w);
}

// Does the current task's descriptor table hold the socket whose sockfs inode is `sock_ino`?
// Decided at the moment of an unlink, before the unlinker can close its descriptor.
int shim_current_holds_socket(__u64 sock_ino)
{
	struct sw_fd_walk walk = { .sock_ino = sock_ino };
	sw_walk_current_fds(sw_holds_word, sw_holds_step, &walk, 0);
	return walk.found;
}

// The same without bpf_loop (kernels before 5.17): the first SW_FD_SCAN_BOUNDED descriptors.
// Returns 1 when found, 0 when not, -1 when not among them but the table has more slots.
int shim_current_holds_socket_bounded(__u64 sock_ino)
{
	struct sw_fd_walk walk = { .sock_ino = sock_ino };
	int partial = sw_walk_current_fds(sw_holds_word, sw_holds_step, &walk, 1);
	return walk.found ? 1 : partial ? -1 : 0;
}

// A bound UNIX socket whose last reference is descriptor `i` of `fds`, else NULL.
static __always_inline struct sock *sw_fd_last_bound_socket(struct file **fds, __u32 i)
{
	struct file *file = sw_socket_file(sw_fd_file(fds, i));
	if (!file || shim_file_refs(file) != 1)
		return 0;
	struct sock *sk = shim_socket_sk(shim_file_socket(file));
	return shim_sk_dentry(sk) ? sk : 0;
}

// Implemented by the programs (process.rs): forgets and reports one released socket.
int sockwatch_release_at_exit(__u64 sk);

// Releases descriptor `i` of `fds` if this exit drops a bound socket's last reference. A
// global function, for the reason sw_fd_is_socket is.
int sw_fd_release_at_exit(__u64 fds, __u32 i)
{
	struct sock *sk = sw_fd_last_bound_socket((struct file **)fds, i);
	if (sk)
		sockwatch_release_at_exit((__u64)sk);
	return 0;
}

static __always_inline long sw_release_step(__u64 i, void *data)
{
	struct sw_fd_walk *walk = data;
	return sw_fd_release_at_exit((__u64)walk->fds, i);
}

static long sw_release_word(__u64 w, void *data)
{
	return sw_walk_word(sw_release_step, data, w);
}

// Releases the bound UNIX sockets whose last reference the exiting current task holds: they
// go with this exit, and no close(2) shows it to the tracepoint tier. The per-socket work is
// a global function, which the verifier checks once, not per descriptor.
void shim_release_last_bound_sockets(void)
{
	struct sw_fd_walk walk = {};
	sw_walk_current_fds(sw_release_word, sw_release_step, &walk, 0);
}

// Without bpf_loop: the first SW_FD_SCAN_BOUNDED descriptors. Returns 1 when the table has
// more slots than that (the rest are left to the sweeps).
int shim_release_last_bound_sockets_bounded(void)
{
	struct sw_fd_walk walk = {};
	return sw_walk_current_fds(sw_release_word, sw_release_step, &walk, 1);
}

// ---- the current syscall's arguments ---------------------------------------------------
//
// The LSM and fentry hooks on unlink and rename are not passed the user's path or rename's
// flags: they come from the syscall's saved registers. Numbers and registers differ per
// architecture (build.rs defines __TARGET_ARCH_<arch>); arm64 has only the *at forms.

#if defined(__TARGET_ARCH_x86)
#define SW_NR_UNLINK 87
#define SW_NR_RMDIR 84
#define SW_NR_RENAME 82
#define SW_NR_UNLINKAT 263
#define SW_NR_RENAMEAT 264
#define SW_NR_RENAMEAT2 316
// A macro, not a typedef: CO-RE relocates the struct by its own name.
#define sw_syscall_regs struct pt_regs
#define SW_REG_NR orig_ax
#define SW_REG_ARG0 di
#define SW_REG_ARG1 si
#define SW_REG_ARG2 dx
#define SW_REG_ARG3 r10
#define SW_REG_ARG4 r8
#define SW_REG_ARG5 r9
#elif defined(__TARGET_ARCH_arm64)
// asm-generic numbers; no unlink, rmdir or rename (-1 never matches a syscall number).
#define SW_NR_UNLINK -1
#define SW_NR_RMDIR -2
#define SW_NR_RENAME -3
#define SW_NR_UNLINKAT 35
#define SW_NR_RENAMEAT 38
#define SW_NR_RENAMEAT2 276
// arm64's pt_regs, as far as this file reads it: regs[] sit in an anonymous union, which the
// loader's CO-RE matching walks. x0 is overwritten by the return value, so the first argument
// is orig_x0.
struct pt_regs___arm64 {
	__u64 regs[31];
	__u64 orig_x0;
	__s32 syscallno;
} __attribute__((preserve_access_index));
#define sw_syscall_regs struct pt_regs___arm64
#define SW_REG_NR syscallno
#define SW_REG_ARG0 orig_x0
#define SW_REG_ARG1 regs[1]
#define SW_REG_ARG2 regs[2]
#define SW_REG_ARG3 regs[3]
#define SW_REG_ARG4 regs[4]
#define SW_REG_ARG5 regs[5]
#else
#error "sockwatch: no syscall decoding for this __TARGET_ARCH"
#endif
#define SW_SYSCALL_NR(regs) BPF_CORE_READ(regs, SW_REG_NR)
#define SW_SYSCALL_ARG0(regs) BPF_CORE_READ(regs, SW_REG_ARG0)
#define SW_SYSCALL_ARG1(regs) BPF_CORE_READ(regs, SW_REG_ARG1)
#define SW_SYSCALL_ARG2(regs) BPF_CORE_READ(regs, SW_REG_ARG2)
#define SW_SYSCALL_ARG3(regs) BPF_CORE_READ(regs, SW_REG_ARG3)
#define SW_SYSCALL_ARG4(regs) BPF_CORE_READ(regs, SW_REG_ARG4)
#define SW_SYSCALL_ARG5(regs) BPF_CORE_READ(regs, SW_REG_ARG5)

// The path argument of the current unlink/rename syscall: the file unlinked or the rename
// target, copied from user memory; returns its length including the NUL, or a negative
// value. Needs bpf_get_current_task_btf (5.11) and bpf_task_pt_regs (5.15).
int shim_syscall_target_path(char *buf)
{
	struct task_struct *task = bpf_get_current_task_btf();
	sw_syscall_regs *regs = (sw_syscall_regs *)bpf_task_pt_regs(task);
	const char *user = 0;
	long nr = SW_SYSCALL_NR(regs);
	if (nr == SW_NR_UNLINK || nr == SW_NR_RMDIR) // (path)
		user = (const char *)SW_SYSCALL_ARG0(regs);
	else if (nr == SW_NR_UNLINKAT || nr == SW_NR_RENAME) // (dfd, path, flags), (old, new)
		user = (const char *)SW_SYSCALL_ARG1(regs);
	else if (nr == SW_NR_RENAMEAT || nr == SW_NR_RENAMEAT2) // (olddfd, old, newdfd, new, …)
		user = (const char *)SW_SYSCALL_ARG3(regs);
	else
		return -1;
	return bpf_probe_read_user_str(buf, SW_PATH_CAP, user);
}

// The descriptor and address arguments of the current socket syscall, read at its exit from
// the registers its entry saved, so that one program at the exit does what an entry program
// and a pending record did: bind and connect pass (fd, addr, len), sendto (fd, buf, len,
// flags, addr, addr_len). Needs bpf_get_current_task_btf (5.11) and bpf_task_pt_regs (5.15).
// bpf_task_pt_regs returns a typed pointer: its fields are loaded directly (CO-RE-relocated
// loads the verifier guards), not copied by a helper call each.
void shim_syscall_sock_call(int sendto, struct sw_sock_call *out)
{
	struct task_struct *task = bpf_get_current_task_btf();
	sw_syscall_regs *regs = (sw_syscall_regs *)bpf_task_pt_regs(task);
	out->fd = regs->SW_REG_ARG0;
	if (sendto) {
		out->addr = regs->SW_REG_ARG4;
		out->len = regs->SW_REG_ARG5;
	} else {
		out->addr = regs->SW_REG_ARG1;
		out->len = regs->SW_REG_ARG2;
	}
}

// The flags of the current renameat2 syscall; 0 for rename, renameat and renames from no
// syscall (io_uring, nfsd, overlayfs). The LSM hook is not passed them.
static __always_inline __u32 sw_syscall_rename_flags(sw_syscall_regs *regs)
{
	return SW_SYSCALL_NR(regs) == SW_NR_RENAMEAT2 ? (__u32)SW_SYSCALL_ARG4(regs) : 0;
}

// Needs bpf_get_current_task_btf (5.11) and bpf_task_pt_regs (5.15).
__u32 shim_syscall_rename_flags(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	return sw_syscall_rename_flags((sw_syscall_regs *)bpf_task_pt_regs(task));
}

// Without bpf_task_pt_regs: the frame the syscall entry saved at the top of the task's kernel
// stack, where task_pt_regs finds it on x86-64 and arm64 (THREAD_SIZE 16 KiB: a kernel
// without KASAN). The frame's size is the target kernel's, relocated.
#define SW_THREAD_SIZE (16 * 1024)
__u32 shim_syscall_rename_flags_bounded(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	char *stack = (char *)BPF_CORE_READ(task, stack);
	if (!stack)
		return 0;
	__u32 frame = bpf_core_type_size(sw_syscall_regs);
	return sw_syscall_rename_flags((sw_syscall_regs *)(stack + SW_THREAD_SIZE - frame));
}

// ---- processes --------------------------------------------------------------------------

// A forked task: its tgid if it is a new process's leader, else 0 (a new thread).
__u32 shim_new_process_tgid(struct task_struct *child)
{
	__u32 pid = BPF_CORE_READ(child, pid), tgid = BPF_CORE_READ(child, tgid);
	return pid == tgid ? tgid : 0;
}

int shim_current_group_dead(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	return BPF_CORE_READ(task, signal, live.counter) == 0;
}

// The current task's mount namespace id (the inode number `/proc/PID/ns/mnt` names): lets
// the agent resolve a refused connect's path through another process of that namespace
// after a short-lived client has exited. 0 when the task has no namespaces left.
__u32 shim_current_mntns(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	return BPF_CORE_READ(task, nsproxy, mnt_ns, ns.inum);
}

// The inode a resolved `struct path` names (kern_path's result); -1 without one.
int shim_path_file(struct path *path, struct sw_file *out)
{
	return path ? sw_inode_file(BPF_CORE_READ(path, dentry, d_inode), out) : -1;
}

// ---- arguments of hooked functions --------------------------------------------------------

struct dentry *shim_renamedata_target(struct renamedata *rd)
{
	return BPF_CORE_READ(rd, new_dentry);
}

struct dentry *shim_renamedata_source(struct renamedata *rd)
{
	return BPF_CORE_READ(rd, old_dentry);
}

__u32 shim_renamedata_flags(struct renamedata *rd)
{
	return BPF_CORE_READ(rd, flags);
}

const void *shim_msghdr_name(struct msghdr *msg)
{
	return BPF_CORE_READ(msg, msg_name);
}

// Kernels before 6.13 count file references in f_count; later ones in f_ref, a file_ref_t
// whose counter holds references - 1.
struct file___f_count {
	atomic_long_t f_count;
} __attribute__((preserve_access_index));
struct file___f_ref {
	file_ref_t f_ref;
} __attribute__((preserve_access_index));

long shim_file_refs(struct file *file)
{
	if (bpf_core_field_exists(((struct file___f_count *)file)->f_count))
		return BPF_CORE_READ((struct file___f_count *)file, f_count.counter);
	return BPF_CORE_READ((struct file___f_ref *)file, f_ref.refcnt.counter) + 1;
}

// Argument `n` of a traced function from an fentry/fexit context (an array of u64). Read
// through a helper: the argument count differs across kernels, and a direct context load
// past the last argument is refused by the verifier even on a path never taken.
__u64 shim_ctx_arg(const __u64 *ctx, __u32 n)
{
	__u64 v = 0;
	bpf_probe_read_kernel(&v, sizeof(v), &ctx[n & 7]);
	return v;
}

// Whether struct renamedata exists: reads of it stay in code the verifier sees only then.
int shim_renamedata_exists(void)
{
	return bpf_core_type_exists(struct renamedata);
}

// The verifier's count of instructions processed so far for the program it is checking.
__u32 shim_verifier_insn_processed(struct bpf_verifier_env *env)
{
	return env ? BPF_CORE_READ(env, insn_processed) : 0;
}

// ---- atomics (rustc's BPF target has no atomic read-modify-write) ------------------------

// Adds `delta` and returns the value after (re-read: a v1-ISA XADD yields no result, and
// racing updates only make the returned value approximate, never the counter).
__u64 shim_atomic_add(__u64 *counter, __s64 delta)
{
	__sync_fetch_and_add(counter, delta);
	return *(volatile __u64 *)counter;
}
