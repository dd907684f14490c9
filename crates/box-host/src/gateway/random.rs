//! The randomness behind the gateway's secrets (sign-in nonces, session ids) and the names
//! of its sign-in pages.

/// 32 random bytes from the OS-seeded CSPRNG, hex: 64 URL-safe characters.
pub fn random_hex32() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}
