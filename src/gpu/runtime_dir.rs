//! A private runtime directory for processes started without one, so that the window-system
//! code Vulkan loaders and Mesa initialise prints no "XDG_RUNTIME_DIR is invalid or not set"
//! lines (seen on servers, in containers and under `sudo`).

/// Where `XDG_RUNTIME_DIR` is unset or not a directory (Linux and the BSDs), points it at
/// `$TMPDIR/ddl-runtime-UID` (created with mode 0700). Call it first thing in `main`, before the
/// first wgpu call and while the process has one thread: it sets an environment variable.
/// Returns the directory it set, if any.
pub fn use_private_runtime_dir() -> Option<std::path::PathBuf> {
    #[cfg(all(unix, not(target_os = "macos"), not(target_os = "ios")))]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let usable = std::env::var_os("XDG_RUNTIME_DIR")
            .map(std::path::PathBuf::from)
            .is_some_and(|d| d.is_absolute() && d.is_dir());
        if usable {
            return None;
        }
        let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("ddl-runtime-{uid}"));
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        // Ours, and private: otherwise leave the environment as it is.
        let meta = std::fs::metadata(&dir).ok()?;
        if !meta.is_dir() || meta.uid() != uid {
            return None;
        }
        if meta.permissions().mode() & 0o777 != 0o700 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).ok()?;
        }
        // SAFETY: documented precondition: called while the process has a single thread.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        Some(dir)
    }
    #[cfg(not(all(unix, not(target_os = "macos"), not(target_os = "ios"))))]
    {
        None
    }
}
