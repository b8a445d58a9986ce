//! A commit's WAL frames written to the kernel in one call, not two each.
//!
//! SQLite appends a page to its WAL as a frame: a 24-byte header, then the
//! page, each with its own `pwrite` (`walWriteOneFrame`). A frame is 4,120
//! bytes, so frames do not sit on the kernel's 4 KiB page-cache pages: for
//! every frame the kernel looks up, locks and marks dirty three cache pages,
//! in two system calls. Every order commits a few frames, so on a busy file
//! these calls are a measurable share of the write gate.
//!
//! [`install`] registers, as the process's default, a VFS that is the
//! platform's own with one change: a WAL file gathers the bytes appended to
//! it in memory, and writes them in one call when anything else happens
//! that could let another reader or writer see the file:
//!
//! - the connection syncs, reads, truncates, sizes or closes the WAL, or
//!   asks it anything else (a commit at `synchronous=FULL` always syncs);
//! - the connection takes or releases a lock on the wal-index, or passes
//!   its memory barrier, through the main database file: a commit becomes
//!   visible to readers only after that barrier, and another connection
//!   can write to the WAL only after this one released its write lock (so
//!   frames of a transaction that rolled back are written, as SQLite would
//!   have, before anyone else writes where they lie);
//! - a write does not continue the gathered bytes, or they reach 8 MiB.
//!
//! A write over bytes still gathered (SQLite rewriting a frame of the
//! transaction) changes them in memory. So what a reader, a checkpoint, a
//! sync or a crash sees is what SQLite wrote, in its order, and nothing
//! gathered outlives the connection's hold on the WAL.

use std::{
    ffi::{c_int, c_void},
    mem::{align_of, size_of},
    ptr,
    sync::{
        OnceLock,
        atomic::{AtomicPtr, Ordering},
    },
};

#[cfg(test)]
use std::sync::atomic::AtomicU64;

use rusqlite::ffi;

/// Gathered bytes past which they are written at once.
const GATHER_MAX: usize = 8 << 20;

/// The most one call to the platform's `xWrite` is given: `unix` masks the
/// count of each `pwrite` to 17 bits, so a write of 128 KiB or more ends in
/// a `pwrite` of nothing, which it reports as a full disk.
const WRITE_MAX: usize = 31 * 4096;

/// The name the wrapping VFS is registered under.
const NAME: &std::ffi::CStr = c"esim-wal-gather";

/// A WAL file opened through the wrapping VFS. SQLite allocates `szOsFile`
/// bytes for it: this struct, then the platform VFS's own file at
/// [`inner_offset`].
#[repr(C)]
struct WalFile {
    /// What SQLite reads: the WAL methods.
    base: ffi::sqlite3_file,
    /// The platform VFS's file, inside the same allocation.
    inner: *mut ffi::sqlite3_file,
    /// Bytes appended and not yet written.
    gathered: Vec<u8>,
    /// Where in the file `gathered` starts.
    gathered_at: i64,
    /// The main database file this WAL belongs to, told when the WAL
    /// closes (null if it was not opened through this VFS).
    main: *mut MainFile,
}

/// A main database file opened through the wrapping VFS (laid out like
/// [`WalFile`]: this struct, then the platform's file).
#[repr(C)]
struct MainFile {
    /// What SQLite reads: the main file's methods.
    base: ffi::sqlite3_file,
    /// The platform VFS's file, inside the same allocation.
    inner: *mut ffi::sqlite3_file,
    /// The WAL this connection opened beside it, while it is open.
    wal: *mut WalFile,
}

/// The wrapping VFS, registered as the default (kept for the process's
/// life: SQLite holds a pointer to it).
struct Registered(ffi::sqlite3_vfs);

// SAFETY: the pointers in the VFS are SQLite's own (its name, the platform
// VFS's methods and app data), which live for the whole process and are
// used from any thread by SQLite itself; written once, before registration.
unsafe impl Send for Registered {}
unsafe impl Sync for Registered {}

static REGISTERED: OnceLock<Option<Box<Registered>>> = OnceLock::new();

/// The platform's default VFS (`unix` on Linux), set before the wrapping
/// VFS is registered, so that a connection opened by another thread the
/// moment it is finds it.
static INNER: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(ptr::null_mut());

/// Calls to the platform's `xWrite` for WAL files, and calls SQLite made.
#[cfg(test)]
static WRITES: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// (writes that reached the platform's file, writes SQLite asked for) so
/// far, for WAL files.
#[cfg(test)]
fn wal_writes() -> (u64, u64) {
    (
        WRITES[0].load(Ordering::Relaxed),
        WRITES[1].load(Ordering::Relaxed),
    )
}

/// Registers the wrapping VFS as the process's default, once; every SQLite
/// connection opened afterwards (sqlx's and rusqlite's, which link the
/// same SQLite) uses it. Returns whether it is in place.
pub(crate) fn install() -> bool {
    REGISTERED.get_or_init(register).is_some()
}

fn register() -> Option<Box<Registered>> {
    // SAFETY: `sqlite3_initialize` may be called any number of times;
    // `sqlite3_vfs_find(NULL)` returns the default VFS, which SQLite keeps
    // for the process's life.
    let inner = unsafe {
        if ffi::sqlite3_initialize() != ffi::SQLITE_OK {
            return None;
        }
        ffi::sqlite3_vfs_find(ptr::null())
    };
    if inner.is_null() {
        return None;
    }
    // SAFETY: `inner` is SQLite's registered default VFS (checked non-null).
    let mut vfs = unsafe { ptr::read(inner) };
    let own = c_int::try_from(inner_offset()).ok()?;
    vfs.szOsFile = vfs.szOsFile.checked_add(own)?;
    vfs.zName = NAME.as_ptr();
    vfs.pNext = ptr::null_mut();
    vfs.xOpen = Some(open);
    INNER.store(inner, Ordering::Release);
    let mut registered = Box::new(Registered(vfs));
    // SAFETY: the box's VFS never moves (the box is kept in REGISTERED for
    // the process's life) and every method it names either is the platform
    // VFS's own or `open` below.
    let rc = unsafe { ffi::sqlite3_vfs_register(&raw mut registered.0, 1) };
    (rc == ffi::SQLITE_OK).then_some(registered)
}

/// Where the platform VFS's file starts inside either wrapper's allocation.
const fn inner_offset() -> usize {
    let size = if size_of::<WalFile>() > size_of::<MainFile>() {
        size_of::<WalFile>()
    } else {
        size_of::<MainFile>()
    };
    let align = align_of::<u64>();
    size.div_ceil(align) * align
}

fn inner_vfs() -> *mut ffi::sqlite3_vfs {
    INNER.load(Ordering::Acquire)
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let inner_vfs = inner_vfs();
    // SAFETY: `inner_vfs` is the platform VFS, whose `xOpen` is always set.
    let Some(inner_open) = (unsafe { inner_vfs.as_ref() }).and_then(|vfs| vfs.xOpen) else {
        return ffi::SQLITE_ERROR;
    };
    let wal = flags & ffi::SQLITE_OPEN_WAL != 0;
    if !wal && flags & ffi::SQLITE_OPEN_MAIN_DB == 0 {
        // Any other file is the platform's own, in the (larger) space
        // SQLite allocated for ours.
        // SAFETY: `file` has room for the platform's file (szOsFile).
        return unsafe { inner_open(inner_vfs, name, file, flags, out_flags) };
    }
    // SAFETY: `file` points at `szOsFile` bytes: a wrapper, then the
    // platform's file at `inner_offset()`; SQLite aligns it for 8 bytes.
    // A WAL's name is one SQLite made, so `sqlite3_database_file_object`
    // finds the main file of the same connection (opened before it).
    unsafe {
        let inner = file
            .cast::<u8>()
            .add(inner_offset())
            .cast::<ffi::sqlite3_file>();
        let rc = inner_open(inner_vfs, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            (*file).pMethods = ptr::null();
            return rc;
        }
        if !wal {
            let main = MainFile {
                base: ffi::sqlite3_file {
                    pMethods: &raw const MAIN_METHODS,
                },
                inner,
                wal: ptr::null_mut(),
            };
            ptr::write(file.cast::<MainFile>(), main);
            return ffi::SQLITE_OK;
        }
        let main = ffi::sqlite3_database_file_object(name);
        let main = if !main.is_null() && ptr::eq((*main).pMethods, &raw const MAIN_METHODS) {
            main.cast::<MainFile>()
        } else {
            ptr::null_mut()
        };
        let wal_file = file.cast::<WalFile>();
        ptr::write(
            wal_file,
            WalFile {
                base: ffi::sqlite3_file {
                    pMethods: &raw const WAL_METHODS,
                },
                inner,
                gathered: Vec::new(),
                gathered_at: 0,
                main,
            },
        );
        if let Some(main) = main.as_mut() {
            main.wal = wal_file;
        }
        ffi::SQLITE_OK
    }
}

/// What the shared methods need of either wrapper.
trait Wrapper {
    /// The platform's file.
    fn inner(&self) -> *mut ffi::sqlite3_file;
    /// Writes what is gathered, before the file is used another way.
    fn release(&mut self) -> c_int;
}

impl Wrapper for WalFile {
    fn inner(&self) -> *mut ffi::sqlite3_file {
        self.inner
    }

    fn release(&mut self) -> c_int {
        if self.gathered.is_empty() {
            return ffi::SQLITE_OK;
        }
        let Some(write) = methods(self.inner).xWrite else {
            self.gathered.clear();
            return ffi::SQLITE_IOERR_WRITE;
        };
        let mut rc = ffi::SQLITE_OK;
        let mut at = self.gathered_at;
        for chunk in self.gathered.chunks(WRITE_MAX) {
            #[cfg(test)]
            WRITES[0].fetch_add(1, Ordering::Relaxed);
            // A chunk is at most WRITE_MAX bytes, which fits a c_int.
            let length = chunk.len() as c_int;
            // SAFETY: the platform file is open; the bytes outlive the call.
            rc = unsafe { write(self.inner, chunk.as_ptr().cast(), length, at) };
            if rc != ffi::SQLITE_OK {
                break;
            }
            at += i64::from(length);
        }
        // Written or failed, they are not written again: a failure is
        // SQLite's to handle, as if its own write had failed.
        self.gathered.clear();
        rc
    }
}

impl Wrapper for MainFile {
    fn inner(&self) -> *mut ffi::sqlite3_file {
        self.inner
    }

    /// Only the wal-index's locks and barrier (`main_shm_lock`,
    /// `main_shm_barrier`) release the WAL's gathered bytes; the main
    /// file's own calls have nothing held.
    fn release(&mut self) -> c_int {
        ffi::SQLITE_OK
    }
}

impl MainFile {
    fn release_wal(&mut self) -> c_int {
        // SAFETY: `wal` is set while the WAL of this connection is open
        // (its close clears it) and used from the connection's thread.
        match unsafe { self.wal.as_mut() } {
            Some(wal) => wal.release(),
            None => ffi::SQLITE_OK,
        }
    }
}

/// The platform file's methods.
fn methods(inner: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: the platform file was opened successfully, so its methods are
    // set and static.
    unsafe { &*(*inner).pMethods }
}

/// The wrapper behind a file SQLite passes to one of its methods.
///
/// # Safety
/// `file` must be a file opened by `open` as a `T` and not closed.
unsafe fn wrapper<'a, T>(file: *mut ffi::sqlite3_file) -> &'a mut T {
    // SAFETY: guaranteed by the caller; SQLite calls a file's methods from
    // one thread at a time.
    unsafe { &mut *file.cast::<T>() }
}

unsafe extern "C" fn wal_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite passes a WAL file opened by `open`.
    let wal = unsafe { wrapper::<WalFile>(file) };
    #[cfg(test)]
    WRITES[1].fetch_add(1, Ordering::Relaxed);
    if wal.main.is_null() {
        // No main file to release the gathered bytes at its locks: a WAL
        // whose main file is not this VFS's writes as SQLite asks.
        let rc = wal.release();
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        // SAFETY: SQLite's arguments, passed on unchanged.
        return unsafe { write::<WalFile>(file, data, amount, offset) };
    }
    let Ok(length) = usize::try_from(amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: SQLite passes `amount` readable bytes at `data`.
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) };
    let gathered_end = wal.gathered_at + wal.gathered.len() as i64;
    let end = offset.saturating_add(i64::from(amount));
    if !wal.gathered.is_empty() && offset >= wal.gathered_at && end <= gathered_end {
        // A frame of this transaction rewritten before it left.
        let from = (offset - wal.gathered_at) as usize;
        wal.gathered[from..from + length].copy_from_slice(bytes);
        return ffi::SQLITE_OK;
    }
    if wal.gathered.is_empty() || offset != gathered_end {
        let rc = wal.release();
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        wal.gathered_at = offset;
    }
    wal.gathered.extend_from_slice(bytes);
    if wal.gathered.len() >= GATHER_MAX {
        return wal.release();
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn wal_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite passes a WAL file opened by `open`, closed only here.
    let wal = unsafe { wrapper::<WalFile>(file) };
    let released = wal.release();
    // SAFETY: `main` is the same connection's main file, still open (SQLite
    // closes the WAL first; the main file's close clears this pointer).
    if let Some(main) = unsafe { wal.main.as_mut() } {
        main.wal = ptr::null_mut();
    }
    let closed = close_inner(wal.inner);
    // SAFETY: the `WalFile` was written by `open`; SQLite frees its memory
    // after this returns and never calls its methods again.
    unsafe { ptr::drop_in_place(file.cast::<WalFile>()) };
    first_error(released, closed)
}

unsafe extern "C" fn main_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite passes a main file opened by `open`, closed only here.
    let main = unsafe { wrapper::<MainFile>(file) };
    let released = main.release_wal();
    // SAFETY: as in `release_wal`.
    if let Some(wal) = unsafe { main.wal.as_mut() } {
        wal.main = ptr::null_mut();
    }
    let closed = close_inner(main.inner);
    first_error(released, closed)
}

/// The first of two result codes that is an error (SQLite's OK if neither
/// is): a release that failed is reported even when the call after it
/// succeeded.
fn first_error(first: c_int, then: c_int) -> c_int {
    if first != ffi::SQLITE_OK { first } else { then }
}

fn close_inner(inner: *mut ffi::sqlite3_file) -> c_int {
    match methods(inner).xClose {
        // SAFETY: the platform file is open and closed once, by its
        // wrapper's close.
        Some(inner_close) => unsafe { inner_close(inner) },
        None => ffi::SQLITE_OK,
    }
}

/// Defines a method that releases what is gathered, then hands the call
/// to the platform file.
macro_rules! released_then {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*), $missing:expr) => {
        unsafe extern "C" fn $name<T: Wrapper>(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: SQLite passes a file opened by `open` as a `T`.
            let wrapper = unsafe { wrapper::<T>(file) };
            let rc = wrapper.release();
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            match methods(wrapper.inner()).$method {
                // SAFETY: the platform file is open; the arguments are
                // SQLite's, passed on unchanged.
                Some(inner) => unsafe { inner(wrapper.inner(), $($arg),*) },
                None => $missing,
            }
        }
    };
}

released_then!(read, xRead, (data: *mut c_void, amount: c_int, offset: i64), ffi::SQLITE_IOERR_READ);
released_then!(write, xWrite, (data: *const c_void, amount: c_int, offset: i64), ffi::SQLITE_IOERR_WRITE);
released_then!(truncate, xTruncate, (size: i64), ffi::SQLITE_IOERR_TRUNCATE);
released_then!(sync, xSync, (flags: c_int), ffi::SQLITE_IOERR_FSYNC);
released_then!(file_size, xFileSize, (size: *mut i64), ffi::SQLITE_IOERR_FSTAT);
released_then!(lock, xLock, (level: c_int), ffi::SQLITE_OK);
released_then!(unlock, xUnlock, (level: c_int), ffi::SQLITE_OK);
released_then!(check_reserved_lock, xCheckReservedLock, (out: *mut c_int), ffi::SQLITE_OK);
released_then!(file_control, xFileControl, (op: c_int, arg: *mut c_void), ffi::SQLITE_NOTFOUND);
released_then!(shm_map, xShmMap, (region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void), ffi::SQLITE_IOERR_SHMMAP);
released_then!(shm_unmap, xShmUnmap, (delete: c_int), ffi::SQLITE_OK);
released_then!(fetch, xFetch, (offset: i64, amount: c_int, out: *mut *mut c_void), ffi::SQLITE_OK);
released_then!(unfetch, xUnfetch, (offset: i64, page: *mut c_void), ffi::SQLITE_OK);

unsafe extern "C" fn shm_lock<T: Wrapper>(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: SQLite passes a file opened by `open` as a `T`.
    let wrapper = unsafe { wrapper::<T>(file) };
    let released = wrapper.release();
    let Some(inner) = methods(wrapper.inner()).xShmLock else {
        return ffi::SQLITE_IOERR_SHMLOCK;
    };
    // SAFETY: the platform file is open; the arguments are SQLite's. A
    // lock is released even when the gathered bytes could not be written:
    // they belong to a transaction that did not commit (a commit's are
    // written at its sync), and holding the lock would stop every writer.
    let rc = unsafe { inner(wrapper.inner(), offset, n, flags) };
    first_error(released, rc)
}

unsafe extern "C" fn main_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: SQLite passes a main file opened by `open`.
    let main = unsafe { wrapper::<MainFile>(file) };
    let released = main.release_wal();
    // SAFETY: SQLite's arguments, passed on unchanged.
    let rc = unsafe { shm_lock::<MainFile>(file, offset, n, flags) };
    first_error(released, rc)
}

unsafe extern "C" fn shm_barrier<T: Wrapper>(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite passes a file opened by `open` as a `T`.
    let wrapper = unsafe { wrapper::<T>(file) };
    if wrapper.release() != ffi::SQLITE_OK {
        // A barrier cannot fail, and a commit may become visible right
        // after it: frames that cannot be written now must not be left
        // behind SQLite's back.
        std::process::abort();
    }
    if let Some(inner) = methods(wrapper.inner()).xShmBarrier {
        // SAFETY: the platform file is open.
        unsafe { inner(wrapper.inner()) }
    }
}

unsafe extern "C" fn main_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite passes a main file opened by `open`.
    let main = unsafe { wrapper::<MainFile>(file) };
    if main.release_wal() != ffi::SQLITE_OK {
        // As in `shm_barrier`.
        std::process::abort();
    }
    // SAFETY: SQLite's argument, passed on unchanged.
    unsafe { shm_barrier::<MainFile>(file) }
}

unsafe extern "C" fn sector_size<T: Wrapper>(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite passes a file opened by `open` as a `T`.
    let wrapper = unsafe { wrapper::<T>(file) };
    match methods(wrapper.inner()).xSectorSize {
        // SAFETY: the platform file is open.
        Some(inner) => unsafe { inner(wrapper.inner()) },
        None => 4096,
    }
}

unsafe extern "C" fn device_characteristics<T: Wrapper>(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite passes a file opened by `open` as a `T`.
    let wrapper = unsafe { wrapper::<T>(file) };
    match methods(wrapper.inner()).xDeviceCharacteristics {
        // SAFETY: the platform file is open.
        Some(inner) => unsafe { inner(wrapper.inner()) },
        None => 0,
    }
}

/// The methods of a WAL file opened through the wrapping VFS.
static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(wal_close),
    xRead: Some(read::<WalFile>),
    xWrite: Some(wal_write),
    xTruncate: Some(truncate::<WalFile>),
    xSync: Some(sync::<WalFile>),
    xFileSize: Some(file_size::<WalFile>),
    xLock: Some(lock::<WalFile>),
    xUnlock: Some(unlock::<WalFile>),
    xCheckReservedLock: Some(check_reserved_lock::<WalFile>),
    xFileControl: Some(file_control::<WalFile>),
    xSectorSize: Some(sector_size::<WalFile>),
    xDeviceCharacteristics: Some(device_characteristics::<WalFile>),
    xShmMap: Some(shm_map::<WalFile>),
    xShmLock: Some(shm_lock::<WalFile>),
    xShmBarrier: Some(shm_barrier::<WalFile>),
    xShmUnmap: Some(shm_unmap::<WalFile>),
    xFetch: Some(fetch::<WalFile>),
    xUnfetch: Some(unfetch::<WalFile>),
};

/// The methods of a main database file opened through the wrapping VFS:
/// the platform's, with the wal-index's locks and barrier releasing the
/// connection's WAL first.
static MAIN_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(main_close),
    xRead: Some(read::<MainFile>),
    xWrite: Some(write::<MainFile>),
    xTruncate: Some(truncate::<MainFile>),
    xSync: Some(sync::<MainFile>),
    xFileSize: Some(file_size::<MainFile>),
    xLock: Some(lock::<MainFile>),
    xUnlock: Some(unlock::<MainFile>),
    xCheckReservedLock: Some(check_reserved_lock::<MainFile>),
    xFileControl: Some(file_control::<MainFile>),
    xSectorSize: Some(sector_size::<MainFile>),
    xDeviceCharacteristics: Some(device_characteristics::<MainFile>),
    xShmMap: Some(shm_map::<MainFile>),
    xShmLock: Some(main_shm_lock),
    xShmBarrier: Some(main_shm_barrier),
    xShmUnmap: Some(shm_unmap::<MainFile>),
    xFetch: Some(fetch::<MainFile>),
    xUnfetch: Some(unfetch::<MainFile>),
};

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, params};

    use super::*;

    fn open(path: &std::path::Path) -> Connection {
        let connection = Connection::open(path).unwrap();
        connection
            .pragma_update(None, "journal_mode", "wal")
            .unwrap();
        connection
            .pragma_update(None, "synchronous", "full")
            .unwrap();
        connection
            .pragma_update(None, "wal_autocheckpoint", 0)
            .unwrap();
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
            )
            .unwrap();
        connection
    }

    /// A fresh folder and the path of a database file in it, with the
    /// VFS in place.
    fn scratch(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        assert!(install());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        (dir, path)
    }

    fn insert(connection: &Connection, byte: u8, size: usize) {
        connection
            .execute(
                "INSERT INTO t (body) VALUES (?1)",
                params![vec![byte; size]],
            )
            .unwrap();
    }

    /// Bytes the connection's WAL holds gathered and not yet written.
    fn gathered_bytes(connection: &Connection) -> usize {
        let mut file: *mut ffi::sqlite3_file = ptr::null_mut();
        // SAFETY: the handle is open for the call; the file control writes
        // the WAL's `sqlite3_file` pointer (SQLite's, valid while the
        // connection is open and not used past this function).
        unsafe {
            let rc = ffi::sqlite3_file_control(
                connection.handle(),
                c"main".as_ptr(),
                ffi::SQLITE_FCNTL_JOURNAL_POINTER,
                (&raw mut file).cast(),
            );
            assert_eq!(rc, ffi::SQLITE_OK);
            assert!(ptr::eq((*file).pMethods, &raw const WAL_METHODS));
            (*file.cast::<WalFile>()).gathered.len()
        }
    }

    fn count(connection: &Connection) -> i64 {
        connection
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap()
    }

    fn integrity(connection: &Connection) -> String {
        connection
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_commits_frames_leave_together_and_every_reader_sees_what_was_committed() {
        let (_dir, path) = scratch("joined.db");
        let writer = open(&path);
        let reader = open(&path);
        let (written_before, asked_before) = wal_writes();
        for round in 0..50 {
            let tx = writer.unchecked_transaction().unwrap();
            for i in 0..20 {
                insert(&tx, (round + i) as u8, 700);
            }
            tx.commit().unwrap();
            assert_eq!(
                count(&reader),
                (round + 1) * 20,
                "a commit is visible to another connection"
            );
        }
        let (written, asked) = wal_writes();
        let (written, asked) = (written - written_before, asked - asked_before);
        assert!(
            asked >= 50 * 4,
            "SQLite wrote frames as header and page: {asked}"
        );
        // Other tests run beside this one and write too; a commit's frames
        // leave in about one call, far fewer than SQLite asked for.
        assert!(written * 3 < asked, "{written} writes for {asked} asked");
        // A checkpoint reads the frames back from the WAL into the file.
        writer
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        drop((writer, reader));
        let again = open(&path);
        assert_eq!(count(&again), 1000);
        assert_eq!(integrity(&again), "ok");
    }

    #[test]
    fn a_rolled_back_spill_leaves_nothing_behind_for_the_next_writer() {
        let (_dir, path) = scratch("spill.db");
        let first = open(&path);
        let second = open(&path);
        // Pages written to the WAL before the commit (as a cache too small
        // for the transaction spills them), then the transaction rolled
        // back: with its pages clean in the cache and the committed ones in
        // the main file (the WAL checkpointed away), the rollback reads
        // nothing from the WAL, so only the release of the write lock can
        // write what was gathered.
        first
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        let tx = first.unchecked_transaction().unwrap();
        for _ in 0..50 {
            insert(&tx, 7, 900);
        }
        tx.cache_flush().unwrap();
        assert!(
            gathered_bytes(&first) > 0,
            "the spilled frames were gathered"
        );
        tx.rollback().unwrap();
        assert_eq!(gathered_bytes(&first), 0, "nothing outlives the write lock");
        // The other connection now writes frames where the spilled ones were.
        for _ in 0..30 {
            insert(&second, 9, 900);
        }
        // The first connection reads and writes again.
        assert_eq!(count(&first), 30);
        insert(&first, 1, 900);
        assert_eq!(count(&second), 31);
        assert_eq!(integrity(&second), "ok");
        drop((first, second));
        let again = open(&path);
        assert_eq!(count(&again), 31);
        assert_eq!(integrity(&again), "ok");
    }

    #[test]
    fn two_writers_taking_turns_across_checkpoints_that_start_the_wal_over_lose_nothing() {
        let (_dir, path) = scratch("turns.db");
        let writers = [open(&path), open(&path)];
        for round in 0..120 {
            let writer = &writers[round % 2];
            let tx = writer.unchecked_transaction().unwrap();
            for _ in 0..(1 + round % 7) {
                insert(&tx, round as u8, 1500);
            }
            tx.commit().unwrap();
            if round % 10 == 9 {
                // The other connection copies the WAL back and starts it over;
                // the next commit writes from the WAL's start again.
                writers[(round + 1) % 2]
                    .execute_batch("PRAGMA wal_checkpoint(RESTART)")
                    .unwrap();
            }
            let expected: i64 = (0..=round).map(|r| 1 + (r % 7) as i64).sum();
            assert_eq!(count(&writers[(round + 1) % 2]), expected, "round {round}");
        }
        assert_eq!(integrity(&writers[0]), "ok");
        drop(writers);
        let again = open(&path);
        assert_eq!(
            count(&again),
            (0..120).map(|r| 1 + (r % 7) as i64).sum::<i64>()
        );
        assert_eq!(integrity(&again), "ok");
    }

    #[test]
    fn a_commit_of_megabytes_leaves_in_pieces_the_platform_takes() {
        let (_dir, path) = scratch("large.db");
        let writer = open(&path);
        let reader = open(&path);
        // Commits of about 0.1, 0.5, 1, 3 and 12 MB, the last past the
        // gathering's own bound.
        let mut rows = 0;
        for size in [30, 130, 260, 800, 3000] {
            let tx = writer.unchecked_transaction().unwrap();
            for i in 0..size {
                insert(&tx, i as u8, 3900);
            }
            tx.commit().unwrap();
            rows += size;
            assert_eq!(count(&reader), rows);
        }
        assert_eq!(integrity(&reader), "ok");
    }

    #[test]
    fn a_wal_left_behind_by_a_process_that_never_closed_is_recovered() {
        let (dir, path) = scratch("recovered.db");
        let writer = open(&path);
        for i in 0..200 {
            insert(&writer, i as u8, 300);
        }
        // Copy the file and its WAL as a crash would leave them (the copy's
        // connection never closed, so no checkpoint ran).
        let copy = dir.path().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        std::fs::copy(
            dir.path().join("recovered.db-wal"),
            dir.path().join("copy.db-wal"),
        )
        .unwrap();
        let recovered = open(&copy);
        assert_eq!(count(&recovered), 200);
        assert_eq!(integrity(&recovered), "ok");
    }
}
