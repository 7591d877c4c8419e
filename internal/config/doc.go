// Package config is moat's configuration: one YAML file for everything moat does
// (isolation, limits, language profiles, the output filter), its search path, and
// its validation.
//
// The zero Config, like an absent file, is the secure default: strict isolation,
// the builtin "default" profile, the engine's default limits, every default filter
// rule on. See testdata/example.yaml for a file with every setting.
//
// # Finding the file
//
// With --config, moat loads that file. Otherwise Find walks SearchPath and takes
// the first file that exists:
//
//  1. $MOAT_CONFIG, if set; it must then exist;
//  2. ./moat.yaml;
//  3. $XDG_CONFIG_HOME/moat/config.yaml, or ~/.config/moat/config.yaml;
//  4. /etc/moat/config.yaml.
//
// If none exists, moat runs with Default(). Find refuses a file it found by
// searching if it is world-writable or owned by another user (not root): whoever
// can write the config can weaken the sandbox. For the same reason, note that
// ./moat.yaml is read from the working directory: a program that can write there
// (an agent editing a project) can change moat's policy for the next run; pin the
// file with --config or $MOAT_CONFIG where that matters.
//
// # Parsing
//
// Load and Parse are strict: unknown keys, duplicate keys, values of the wrong type,
// more than one YAML document, and YAML anchors, aliases and merge keys (use extends
// instead) are errors. Every problem found is reported, not just the first, as an
// *Error whose lines read
//
//	moat.yaml:12: profiles.web.python.mode: unknown mode "allow" (want allowlist, denylist or off)
//
// A null value (`timeout:` with nothing after it) counts as absent; a value given
// explicitly must be valid, so `cpus: 0` is an error rather than "unset".
//
// # Profiles
//
// A profile holds the language-level rules (Python imports, builtins, attributes and
// file access; shell commands) and limits. Three are builtin (BuiltinProfiles):
// strict, default and open. A user-defined profile extends another (default, when
// extends is empty), and ResolveProfile lays it over its parent: strings and limits
// it sets replace the parent's, lists it sets replace the parent's whole list (so
// `allow: []` clears one), and python.modules merges by module name (`os: {}`
// removes an inherited rule). User profiles may not take a builtin name.
//
// The language rules are defence in depth and a source of clear errors; the box is
// the security boundary, and the host stays safe with every profile, open included.
//
// # Validation and warnings
//
// Validate checks every setting and the rules between them (see its doc), and
// Warnings lists, in plain words, the settings that weaken isolation, for the caller
// to log and show. Filter rule names belong to the filter package: Validate checks
// their spelling, and CheckFilterNames checks them against the filter's lists.
//
// Limits are strings in the file ("256MiB", "30s"); Limits.Resolve parses them into
// ResolvedLimits for the engine.
//
// # Server
//
// The server section configures `moat serve`: the listen address (DefaultListen,
// loopback), the data directory (DefaultDataDir: /var/lib/moat for root, else
// $XDG_DATA_HOME/moat or ~/.local/share/moat), caps on request bodies and files,
// the shutdown grace period, session lifetimes and the API keys. Each key names a
// principal with its profiles, quotas and caps on the limits a request may ask
// for; the key itself comes from an environment variable (key_env) or is given as
// its SHA-256 (key_sha256), so the file never holds it. Without keys, the gate
// generates a token in the data directory.
//
// Config.ResolveServer applies the defaults, reads the key_env variables and
// returns a ResolvedServer holding only the keys' hashes. Validate checks the
// section without reading the environment, so `moat config check` works anywhere.
//
// # Backend
//
// The backend section chooses what makes boxes: native (the default), docker (a
// hardened container per box) or gvisor (docker with the daemon's runsc runtime;
// runsc run directly is not built yet), the daemon's address, the image and the
// runtime. Config.ResolveBackend applies the --backend flag and the defaults. A
// backend that cannot start is an error for the caller to report; only a fallback
// list spelled out in the file lets moat use another one, and that is a warning.
package config
