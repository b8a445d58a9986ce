//! WAL frames written to the kernel in one call each, not two.
//!
//! SQLite appends a page to its WAL as a frame: a 24-byte header, then the
//! page, each with its own `pwrite`. A frame is 4,120 bytes, so frames do
//! not sit on the kernel's 4 KiB page-cache pages: the header lands in one
//! cache page and the page after it spans that one and the next, and the
//! kernel looks up, locks and marks dirty three cache pages per frame, with
//! two system calls. Every order commits a few frames, so on a busy file
//! these calls are a measurable share of the write gate.
//!
//! [`install`] registers, as the process's default, a VFS that is the
//! platform's own with one change for WAL files: a frame header is held
//! back until the page that follows it, and the two leave in one `pwrite`
//! (one system call, two cache pages). Nothing else is held: SQLite writes
//! a frame's page right after its header (`walWriteOneFrame`), and a header
//! still held when anything else happens to the file (another write, a
//! read, a sync, its size, a lock, closing) is written first, so the file
//! as any reader, checkpoint or sync sees it is what SQLite wrote, in the
//! order it wrote it. A header written over a frame already in the file
//! (SQLite's pass that rewrites checksums at a commit, which no page
//! follows) is written at once, not held.

use std::{
    ffi::{c_int, c_void},
    mem::{align_of, size_of},
    ptr,
    sync::OnceLock,
};

#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::ffi;

/// The size of a WAL frame's header (`WAL_FRAME_HDRSIZE` in SQLite).
const FRAME_HEADER: usize = 24;

/// The name the wrapping VFS is registered under.
const NAME: &std::ffi::CStr = c"esim-wal-frames";

/// A WAL file opened through the wrapping VFS. SQLite allocates `szOsFile`
/// bytes for it: this struct, then the platform VFS's own file at
/// [`inner_offset`].
#[repr(C)]
struct WalFile {
    /// What SQLite reads: the methods below.
    base: ffi::sqlite3_file,
    /// The platform VFS's file, inside the same allocation.
    inner: *mut ffi::sqlite3_file,
    /// A frame header waiting for its page, and where it goes.
    held: Option<(i64, [u8; FRAME_HEADER])>,
    /// The furthest byte this handle has read or written since the WAL
    /// last started over: a header below it rewrites a frame already there
    /// (SQLite's checksum pass, which no page follows), and is not held.
    high_water: i64,
    /// Header and page side by side for their one write (kept between
    /// frames so that it is allocated once per file).
    joined: Vec<u8>,
}

/// The wrapping VFS and what it wraps, set once.
struct Registered {
    /// The platform's default VFS (`unix` on Linux).
    inner: *mut ffi::sqlite3_vfs,
    /// The wrapping VFS, registered as the default.
    vfs: ffi::sqlite3_vfs,
}

// SAFETY: the pointers in `Registered` are SQLite's registered VFS objects,
// which live for the whole process and are used from any thread by SQLite
// itself; they are written once, before registration, and only read after.
unsafe impl Send for Registered {}
unsafe impl Sync for Registered {}

static REGISTERED: OnceLock<Option<Box<Registered>>> = OnceLock::new();

/// Frames written header and page together, over the process's life.
#[cfg(test)]
static JOINED: AtomicU64 = AtomicU64::new(0);

/// Frames written header and page in one call so far.
#[cfg(test)]
fn joined_frames() -> u64 {
    JOINED.load(Ordering::Relaxed)
}

/// The methods of a WAL file opened through the wrapping VFS.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

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
    let mut registered = Box::new(Registered { inner, vfs });
    // SAFETY: the box's VFS never moves (the box is kept in REGISTERED for
    // the process's life) and every method it names either is the platform
    // VFS's own or `open` below.
    let rc = unsafe { ffi::sqlite3_vfs_register(&raw mut registered.vfs, 1) };
    (rc == ffi::SQLITE_OK).then_some(registered)
}

/// Where the platform VFS's file starts inside a [`WalFile`]'s allocation.
const fn inner_offset() -> usize {
    let align = align_of::<u64>();
    size_of::<WalFile>().div_ceil(align) * align
}

fn inner_vfs() -> *mut ffi::sqlite3_vfs {
    match REGISTERED.get() {
        Some(Some(registered)) => registered.inner,
        // `open` is only reachable once registration succeeded.
        _ => ptr::null_mut(),
    }
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
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Any other file is the platform's own, in the (larger) space
        // SQLite allocated for ours.
        // SAFETY: `file` has room for the platform's file (szOsFile).
        return unsafe { inner_open(inner_vfs, name, file, flags, out_flags) };
    }
    // SAFETY: `file` points at `szOsFile` bytes: a `WalFile`, then the
    // platform's file at `inner_offset()`; SQLite aligns it for 8 bytes.
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
        ptr::write(
            file.cast::<WalFile>(),
            WalFile {
                base: ffi::sqlite3_file {
                    pMethods: &raw const METHODS,
                },
                inner,
                held: None,
                high_water: 0,
                joined: Vec::new(),
            },
        );
        ffi::SQLITE_OK
    }
}

/// The `WalFile` behind a file SQLite passes to a method of [`METHODS`].
///
/// # Safety
/// `file` must be a file opened by `open` with the WAL flag and not closed.
unsafe fn wal<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    // SAFETY: guaranteed by the caller; SQLite calls a file's methods from
    // one thread at a time.
    unsafe { &mut *file.cast::<WalFile>() }
}

/// The platform file's methods.
fn methods(wal: &WalFile) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: the platform file was opened successfully, so its methods are
    // set and static.
    unsafe { &*(*wal.inner).pMethods }
}

/// Writes a held frame header on its own, before anything else touches the
/// file.
fn release(wal: &mut WalFile) -> c_int {
    let Some((offset, header)) = wal.held.take() else {
        return ffi::SQLITE_OK;
    };
    let Some(write) = methods(wal).xWrite else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: the platform file is open; the buffer outlives the call.
    unsafe {
        write(
            wal.inner,
            header.as_ptr().cast(),
            FRAME_HEADER as c_int,
            offset,
        )
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite passes a file opened by `open`.
    let wal = unsafe { wal(file) };
    let Some(inner_write) = methods(wal).xWrite else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    let length = usize::try_from(amount).unwrap_or(0);
    // The WAL's own header, written at its start when it starts over.
    if offset == 0 {
        wal.high_water = 0;
    }
    let end = offset.saturating_add(i64::from(amount));
    // SAFETY: SQLite passes `amount` readable bytes at `data`.
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) };
    match wal.held.take() {
        Some((at, header)) if at + FRAME_HEADER as i64 == offset => {
            wal.joined.clear();
            wal.joined.extend_from_slice(&header);
            wal.joined.extend_from_slice(bytes);
            let Ok(joined_length) = c_int::try_from(wal.joined.len()) else {
                return ffi::SQLITE_IOERR_WRITE;
            };
            #[cfg(test)]
            JOINED.fetch_add(1, Ordering::Relaxed);
            wal.high_water = wal.high_water.max(end);
            // SAFETY: the platform file is open; `joined` outlives the call.
            unsafe { inner_write(wal.inner, wal.joined.as_ptr().cast(), joined_length, at) }
        }
        held => {
            wal.held = held;
            let rc = release(wal);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            if length == FRAME_HEADER && offset >= wal.high_water {
                let mut header = [0; FRAME_HEADER];
                header.copy_from_slice(bytes);
                wal.held = Some((offset, header));
                return ffi::SQLITE_OK;
            }
            wal.high_water = wal.high_water.max(end);
            // SAFETY: the platform file is open; SQLite's buffer outlives
            // the call.
            unsafe { inner_write(wal.inner, data, amount, offset) }
        }
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite passes a file opened by `open`, closed only here.
    let wal = unsafe { wal(file) };
    let released = release(wal);
    let closed = match methods(wal).xClose {
        // SAFETY: the platform file is open and closed once, here.
        Some(inner_close) => unsafe { inner_close(wal.inner) },
        None => ffi::SQLITE_OK,
    };
    // SAFETY: the `WalFile` was written by `open`; SQLite frees its memory
    // after this returns and never calls its methods again.
    unsafe { ptr::drop_in_place(file.cast::<WalFile>()) };
    if released != ffi::SQLITE_OK {
        released
    } else {
        closed
    }
}

/// Defines a method that writes a held header first, then hands the call
/// to the platform file.
macro_rules! released_then {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*), $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: SQLite passes a file opened by `open`.
            let wal = unsafe { wal(file) };
            let rc = release(wal);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            match methods(wal).$method {
                // SAFETY: the platform file is open; the arguments are
                // SQLite's, passed on unchanged.
                Some(inner) => unsafe { inner(wal.inner, $($arg),*) },
                None => $missing,
            }
        }
    };
}

released_then!(inner_read, xRead, (data: *mut c_void, amount: c_int, offset: i64), ffi::SQLITE_IOERR_READ);
released_then!(inner_truncate, xTruncate, (size: i64), ffi::SQLITE_IOERR_TRUNCATE);

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    data: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite passes a file opened by `open`.
    let wal = unsafe { wal(file) };
    wal.high_water = wal.high_water.max(offset.saturating_add(i64::from(amount)));
    // SAFETY: SQLite's arguments, passed on unchanged.
    unsafe { inner_read(file, data, amount, offset) }
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: SQLite passes a file opened by `open`.
    let wal = unsafe { wal(file) };
    wal.high_water = wal.high_water.min(size);
    // SAFETY: SQLite's arguments, passed on unchanged.
    unsafe { inner_truncate(file, size) }
}
released_then!(sync, xSync, (flags: c_int), ffi::SQLITE_IOERR_FSYNC);
released_then!(file_size, xFileSize, (size: *mut i64), ffi::SQLITE_IOERR_FSTAT);
released_then!(lock, xLock, (level: c_int), ffi::SQLITE_OK);
released_then!(unlock, xUnlock, (level: c_int), ffi::SQLITE_OK);
released_then!(check_reserved_lock, xCheckReservedLock, (out: *mut c_int), ffi::SQLITE_OK);
released_then!(file_control, xFileControl, (op: c_int, arg: *mut c_void), ffi::SQLITE_NOTFOUND);
released_then!(shm_map, xShmMap, (region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void), ffi::SQLITE_IOERR_SHMMAP);
released_then!(shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int), ffi::SQLITE_IOERR_SHMLOCK);
released_then!(shm_unmap, xShmUnmap, (delete: c_int), ffi::SQLITE_OK);
released_then!(fetch, xFetch, (offset: i64, amount: c_int, out: *mut *mut c_void), ffi::SQLITE_OK);
released_then!(unfetch, xUnfetch, (offset: i64, page: *mut c_void), ffi::SQLITE_OK);

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite passes a file opened by `open`.
    let wal = unsafe { wal(file) };
    match methods(wal).xSectorSize {
        // SAFETY: the platform file is open.
        Some(inner) => unsafe { inner(wal.inner) },
        None => 4096,
    }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite passes a file opened by `open`.
    let wal = unsafe { wal(file) };
    match methods(wal).xDeviceCharacteristics {
        // SAFETY: the platform file is open.
        Some(inner) => unsafe { inner(wal.inner) },
        None => 0,
    }
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite passes a file opened by `open`.
    let wal = unsafe { wal(file) };
    if release(wal) != ffi::SQLITE_OK {
        // A barrier cannot fail; a header that cannot be written now would
        // leave a frame half on disk behind SQLite's back.
        std::process::abort();
    }
    if let Some(inner) = methods(wal).xShmBarrier {
        // SAFETY: the platform file is open.
        unsafe { inner(wal.inner) }
    }
}

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
    fn frames_are_joined_and_every_reader_sees_what_was_committed() {
        assert!(install());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("joined.db");
        let writer = open(&path);
        let reader = open(&path);
        let before = joined_frames();
        for round in 0..50 {
            let tx = writer.unchecked_transaction().unwrap();
            for i in 0..20 {
                tx.execute(
                    "INSERT INTO t (body) VALUES (?1)",
                    params![vec![(round + i) as u8; 700]],
                )
                .unwrap();
            }
            tx.commit().unwrap();
            assert_eq!(
                count(&reader),
                (round + 1) * 20,
                "a commit is visible to another connection"
            );
        }
        assert!(
            joined_frames() - before >= 50,
            "each commit wrote its frames joined"
        );
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
        assert!(install());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill.db");
        let first = open(&path);
        let second = open(&path);
        // A page cache of a few pages makes a large transaction spill frames
        // into the WAL before its commit.
        first.pragma_update(None, "cache_size", 10).unwrap();
        let tx = first.unchecked_transaction().unwrap();
        for _ in 0..400 {
            tx.execute("INSERT INTO t (body) VALUES (?1)", params![vec![7u8; 900]])
                .unwrap();
        }
        tx.rollback().unwrap();
        // The other connection now writes frames where the spilled ones were.
        for _ in 0..30 {
            second
                .execute("INSERT INTO t (body) VALUES (?1)", params![vec![9u8; 900]])
                .unwrap();
        }
        // The first connection reads and writes again.
        assert_eq!(count(&first), 30);
        first
            .execute("INSERT INTO t (body) VALUES (?1)", params![vec![1u8; 900]])
            .unwrap();
        assert_eq!(count(&second), 31);
        assert_eq!(integrity(&second), "ok");
        drop((first, second));
        let again = open(&path);
        assert_eq!(count(&again), 31);
        assert_eq!(integrity(&again), "ok");
    }

    #[test]
    fn a_wal_left_behind_by_a_process_that_never_closed_is_recovered() {
        assert!(install());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recovered.db");
        let writer = open(&path);
        for i in 0..200 {
            writer
                .execute(
                    "INSERT INTO t (body) VALUES (?1)",
                    params![vec![i as u8; 300]],
                )
                .unwrap();
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
