"""What an environment provably holds: every installed file's hash recorded at build time and what
changed since (``files``), the CycloneDX SBOM (``sbom``), the signed in-toto / SLSA build
provenance (``provenance``) and the OSV advisories that affect a lock (``advisories``).

Below builder, verify and release, which import it; it reads locks and stacks, never builds."""
