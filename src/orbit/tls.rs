//! TLS for `https://` and `wss://`: which certificate authorities the Orbit
//! client trusts.
//!
//! One rustls [`ClientConfig`] (ring provider, TLS 1.2 and 1.3) serves both
//! the HTTP client and the WebSocket stream. It trusts Mozilla's root
//! certificates as shipped in the `webpki-roots` crate — a production Orbit
//! with a public certificate needs nothing more — plus, optionally, the
//! certificates of a private CA read from a PEM file (`ORBIT_CA_FILE`).
//! The operating system's certificate store is not consulted.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// The certificate authorities the Orbit client trusts, as one shared rustls
/// configuration. Cheap to clone.
#[derive(Clone)]
pub struct OrbitTls {
    config: Arc<ClientConfig>,
    private_cas: usize,
}

/// Why a CA file cannot be used. Names the file, never quotes its content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaFileError {
    /// The file cannot be read.
    #[error("cannot read CA file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no `-----BEGIN CERTIFICATE-----` block.
    #[error("CA file {0} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate(PathBuf),
    /// A certificate in the file is malformed or unusable as a trust anchor.
    #[error("CA file {path} is not usable: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, without content.
        problem: String,
    },
}

impl OrbitTls {
    /// Trusts Mozilla's root certificates only: for an Orbit with a public
    /// certificate.
    pub fn public_roots() -> Self {
        static PUBLIC: OnceLock<Arc<ClientConfig>> = OnceLock::new();
        let config = PUBLIC.get_or_init(|| client_config(public_root_store()));
        Self {
            config: config.clone(),
            private_cas: 0,
        }
    }

    /// Trusts Mozilla's root certificates and every certificate in the PEM
    /// file at `path` (a private CA, possibly with intermediates).
    pub fn with_ca_file(path: &Path) -> Result<Self, CaFileError> {
        let pem = std::fs::read(path).map_err(|source| CaFileError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        let invalid = |problem: String| CaFileError::Invalid {
            path: path.to_owned(),
            problem,
        };
        let mut roots = public_root_store();
        let mut private_cas = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| invalid(format!("malformed PEM ({e})")))?;
            roots
                .add(cert)
                .map_err(|e| invalid(format!("not a usable CA certificate ({e})")))?;
            private_cas += 1;
        }
        if private_cas == 0 {
            return Err(CaFileError::NoCertificate(path.to_owned()));
        }
        Ok(Self {
            config: client_config(roots),
            private_cas,
        })
    }

    /// How many private CA certificates are trusted besides the public roots.
    pub fn private_cas(&self) -> usize {
        self.private_cas
    }

    /// The shared rustls configuration (ring, these roots), for another
    /// HTTPS client that should trust what Orbit's client trusts.
    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }
}

impl Default for OrbitTls {
    /// [`OrbitTls::public_roots`].
    fn default() -> Self {
        Self::public_roots()
    }
}

impl fmt::Debug for OrbitTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrbitTls")
            .field("roots", &"webpki-roots")
            .field("private_cas", &self.private_cas)
            .finish()
    }
}

fn public_root_store() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

fn client_config(roots: RootCertStore) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Both the API calls and the WebSocket upgrade are HTTP/1.1.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Describes a failed connection attempt when TLS is what failed: the
/// rustls error somewhere in `e`'s causes, with a hint for an untrusted
/// certificate. `None` when TLS is not involved.
pub(super) fn describe_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let tls = find_rustls_error(e)?;
    let hint = match tls {
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature,
        ) => {
            "; Orbit's certificate is not signed by a trusted CA: for a private CA set \
             ORBIT_CA_FILE to its PEM certificate"
        }
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        ) => "; Orbit's certificate does not name the host of ORBIT_URL",
        rustls::Error::InvalidCertificate(_) => "; Orbit's certificate was refused",
        _ => "",
    };
    Some(format!("TLS handshake failed: {tls}{hint}"))
}

/// The first [`rustls::Error`] among `e` and its causes, including errors
/// wrapped in `std::io::Error` (whose `source()` skips the wrapped error).
fn find_rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    crate::failure::chain(e).find_map(|err| {
        err.downcast_ref::<rustls::Error>().or_else(|| {
            let inner = err.downcast_ref::<std::io::Error>()?.get_ref()?;
            find_rustls_error(inner)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, content: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "result-inbox-orbit-tls-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ca.pem");
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn the_public_roots_are_mozillas() {
        let tls = OrbitTls::public_roots();
        assert_eq!(tls.private_cas(), 0);
        assert_eq!(tls.config().alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(format!("{tls:?}").contains("webpki-roots"));
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let err = OrbitTls::with_ca_file(Path::new("/nonexistent/ca.pem")).unwrap_err();
        assert!(matches!(err, CaFileError::Unreadable { .. }));
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn a_file_without_certificates_is_refused_without_quoting_it() {
        let path = temp_file("empty", b"sentinel-secret\n");
        let err = OrbitTls::with_ca_file(&path).unwrap_err();
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
        assert!(matches!(err, CaFileError::NoCertificate(_)), "{err}");
        assert!(!err.to_string().contains("sentinel-secret"));
    }

    #[test]
    fn a_certificate_that_is_not_der_is_refused() {
        let pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let path = temp_file("garbage", pem);
        let err = OrbitTls::with_ca_file(&path).unwrap_err();
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
        assert!(matches!(err, CaFileError::Invalid { .. }), "{err}");
    }

    #[test]
    fn a_tls_failure_is_found_behind_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped =
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls));
        let text = describe_failure(&wrapped).unwrap();
        assert!(text.starts_with("TLS handshake failed: invalid peer certificate"));
        assert!(text.contains("ORBIT_CA_FILE"), "{text}");
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(describe_failure(&plain), None);
    }
}
