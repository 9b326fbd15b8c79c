import X509

/// X509.Certificate, named apart from other `Certificate` types in scope.
typealias X509Certificate = X509.Certificate
