//! Rich events (`include/weft/event.h`): sites that write their own
//! records into the calling thread's ring. Each site is a descriptor in
//! the module's `weft_events` section, which `weft_image` reads from the
//! file. weft enables a site by writing into its descriptor in the process
//! the event id, the ring's geometry, the addresses of the ring-mode words
//! and, last, the address of the ring function.

use super::*;
use weft_patch::mini::ring_function;
use weft_plan::Allocate;

// Offsets of the descriptor fields weft writes (checked against
// `include/weft/event.h` by the patch crate's C header test).
use weft_patch::region::event_site::{ID as SITE_ID, RING_OF_THREAD as SITE_RING_OF_THREAD};

/// The session's rich event sites: what was asked, what is enabled.
#[derive(Debug, Clone)]
pub(super) struct RichSites {
    /// `--trace event:PROVIDER:NAME` requests (globs), also for libraries
    /// loaded later.
    requests: Vec<(String, String)>,
    /// Their strings' and byte arrays' cap.
    cap: u16,
    /// Descriptors of the sites weft has enabled.
    enabled: Vec<RemoteAddr>,
    /// The ring function (see `mini::ring_function`), once placed.
    ring_function: Option<u64>,
    /// Whether rich events were ever enabled: weft's memory then stays
    /// mapped after detach, since a thread may be writing an event into it.
    pub(super) ever_used: bool,
}

impl Default for RichSites {
    fn default() -> RichSites {
        RichSites {
            requests: Vec::new(),
            cap: 128,
            enabled: Vec::new(),
            ring_function: None,
            ever_used: false,
        }
    }
}

impl RichSites {
    /// Descriptors of the sites weft has enabled.
    pub(super) fn enabled(&self) -> &[RemoteAddr] {
        &self.enabled
    }

    /// The ring function, once placed.
    pub(super) fn ring_function(&self) -> Option<u64> {
        self.ring_function
    }
}

/// What a rich event value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A 64-bit integer or pointer (`i`).
    Int,
    /// A NUL-terminated string (`s`).
    Str,
    /// A byte array (`b`).
    Bytes,
}

/// A rich event site found in the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSite {
    /// The module holding it.
    pub module: String,
    /// Runtime address of its descriptor.
    pub addr: RemoteAddr,
    /// Provider, as written in `WEFT_EVENT`.
    pub provider: String,
    /// Name.
    pub name: String,
    /// Its values' names and kinds.
    pub fields: Vec<(String, FieldKind)>,
}

/// Parses a site's field list, `id:i path:s body:b`.
fn parse_fields(text: &str) -> Option<Vec<(String, FieldKind)>> {
    text.split([' ', ','])
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (name, kind) = f.split_once(':')?;
            let kind = match kind {
                "i" => FieldKind::Int,
                "s" => FieldKind::Str,
                "b" => FieldKind::Bytes,
                _ => return None,
            };
            Some((name.to_string(), kind))
        })
        .collect::<Option<Vec<_>>>()
        .filter(|f| f.len() <= ring::MAX_ARGS)
}

impl Session {
    /// The rich event sites of the loaded modules (as their files
    /// describe them). A site whose field list does not parse is skipped.
    pub fn event_sites(&mut self) -> Result<Vec<EventSite>> {
        self.refresh_modules()?;
        Ok(self.sites_from(0))
    }

    /// The sites of modules `first..`.
    fn sites_from(&self, first: usize) -> Vec<EventSite> {
        self.modules
            .iter()
            .skip(first)
            .flat_map(|m| {
                m.image.event_sites().iter().filter_map(|s| {
                    Some(EventSite {
                        module: m.name.clone(),
                        addr: m.runtime(s.addr),
                        provider: s.provider.clone(),
                        name: s.name.clone(),
                        fields: parse_fields(&s.fields)?,
                    })
                })
            })
            .collect()
    }

    /// Bytes copied at most from each string or byte array of a rich event.
    pub(super) fn event_cap(&self) -> u16 {
        self.rich.cap
    }

    /// Asks for the sites matching `provider:name` (globs), in the modules
    /// loaded now and in libraries loaded later (see `handle_loads`), their
    /// strings and byte arrays copied up to `cap` bytes each. Returns the
    /// sites loaded now, which [`Session::enable_event_sites`] enables.
    pub fn trace_event_sites(
        &mut self,
        provider: &str,
        name: &str,
        cap: u16,
    ) -> Result<Vec<EventSite>> {
        self.rich
            .requests
            .push((provider.to_string(), name.to_string()));
        self.rich.cap = cap;
        let all = self.event_sites()?;
        Ok(all
            .into_iter()
            .filter(|s| {
                weft_image::glob_match(provider, &s.provider)
                    && weft_image::glob_match(name, &s.name)
            })
            .collect())
    }

    /// Sites of modules `first..` that a request asks for.
    pub(super) fn requested_sites_from(&self, first: usize) -> Vec<EventSite> {
        let wanted = |s: &EventSite| {
            self.rich.requests.iter().any(|(p, n)| {
                weft_image::glob_match(p, &s.provider) && weft_image::glob_match(n, &s.name)
            })
        };
        self.sites_from(first).into_iter().filter(wanted).collect()
    }

    /// Enables rich event sites in the stopped process: each gets an event
    /// id, the ring's geometry and the ring function; their strings and
    /// byte arrays are copied up to `cap` bytes each.
    pub fn enable_event_sites(
        &mut self,
        tracee: &mut Tracee,
        sites: &[EventSite],
        cap: u16,
    ) -> Result<()> {
        self.adopt(tracee)?;
        let Some(first) = sites.first() else {
            return Ok(());
        };
        let module = self
            .modules
            .iter()
            .position(|m| m.name == first.module)
            .unwrap_or(0);
        let ci = self.ensure_cluster(tracee, module)?;
        let c = self.clusters[ci];
        let function = match self.rich.ring_function {
            Some(f) => f,
            None => {
                let at = c.code + c.used;
                let code = ring_function(at, self.thread_table(ci))?;
                let f = self.alloc_code(ci, &code)?;
                self.rich.ring_function = Some(f);
                f
            }
        };
        let sync = c.data + self.layout.header.sync_offset;
        for site in sites {
            let mask = |kinds: &[FieldKind]| {
                site.fields
                    .iter()
                    .enumerate()
                    .filter(|(_, (_, k))| kinds.contains(k))
                    .fold(0u16, |m, (i, _)| m | 1 << i)
            };
            let id = self.event(EventInfo {
                module: site.module.clone(),
                function: format!("{}:{}", site.provider, site.name),
                kind: PointKind::Instruction(0),
                args: site.fields.len() as u8,
                strings: mask(&[FieldKind::Str, FieldKind::Bytes]),
                binary: mask(&[FieldKind::Bytes]),
                names: site.fields.iter().map(|(n, _)| n.clone()).collect(),
            })?;
            let mut fields = Vec::with_capacity(48);
            for word in [
                u64::from(id),
                u64::from(cap),
                self.layout.header.ring_data,
                sync + weft_patch::region::sync::RING_WAIT_UNTIL,
                sync + weft_patch::region::sync::RING_OVERWRITE,
                self.clock_gettime,
            ] {
                fields.extend_from_slice(&word.to_le_bytes());
            }
            // Listed in the journal before the site is enabled.
            self.rich.enabled.push(site.addr);
            self.rich.ever_used = true;
            self.write_journal();
            let mem = tracee.memory();
            mem.write(site.addr + SITE_ID, &fields)?;
            mem.write(site.addr + SITE_RING_OF_THREAD, &function.to_le_bytes())?;
        }
        Ok(())
    }

    /// Disables every rich event site weft enabled (the process stopped).
    pub(super) fn disable_event_sites(&mut self, tracee: &mut Tracee) -> Result<()> {
        for addr in std::mem::take(&mut self.rich.enabled) {
            match tracee
                .memory()
                .write(addr + SITE_RING_OF_THREAD, &0u64.to_le_bytes())
            {
                Ok(()) => {}
                Err(e) if e.is_gone() => return Err(e.into()),
                // A library unloaded since: nothing to disable.
                Err(_) => {}
            }
        }
        self.write_journal();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_fields_parse() {
        assert_eq!(
            parse_fields("id:i path:s,body:b"),
            Some(vec![
                ("id".into(), FieldKind::Int),
                ("path".into(), FieldKind::Str),
                ("body".into(), FieldKind::Bytes)
            ])
        );
        assert_eq!(parse_fields("id:x"), None);
        assert_eq!(parse_fields("id"), None);
        assert_eq!(parse_fields(&"a:i ".repeat(13)), None);
    }
}
