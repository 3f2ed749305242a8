//! The model written back into a snapshot, for the control plane: the inverse of how
//! `compile` reads a route's format and conditions.

use ferry_protos::v1 as pb;

use super::model::{Format, HeaderEncoding, HostMatch, PathMatch, RouteConditions};

impl Format {
    /// Writes the format and its options into a snapshot route: the inverse of how
    /// `Config::from_snapshot` reads them (`route_format`).
    pub fn write_to(&self, r: &mut pb::Route) {
        match self {
            Format::KserveV1 => r.format = pb::Format::KserveV1 as i32,
            Format::KserveV2 { packed } => {
                r.format = pb::Format::KserveV2 as i32;
                r.packed = *packed;
            }
            Format::KserveV2Grpc { packed } => {
                r.format = pb::Format::KserveV2Grpc as i32;
                r.packed = *packed;
            }
            Format::Json {
                entity_pointer,
                inject_pointer,
            } => {
                r.format = pb::Format::Json as i32;
                r.entity_pointer.clone_from(entity_pointer);
                r.inject_pointer.clone_from(inject_pointer);
            }
            Format::Header {
                features_header,
                max_header_bytes,
                encoding,
            } => {
                r.format = pb::Format::Header as i32;
                r.features_header.clone_from(features_header);
                r.max_header_bytes = *max_header_bytes;
                r.features_encoding = match encoding {
                    HeaderEncoding::Json => pb::FeaturesEncoding::Json,
                    HeaderEncoding::ProtobufBase64 => pb::FeaturesEncoding::ProtobufBase64,
                } as i32;
            }
            Format::FeastRest => r.format = pb::Format::FeastRest as i32,
        }
    }
}

impl RouteConditions {
    /// The conditions as a snapshot writes them: the inverse of how `Config::from_snapshot`
    /// reads them (`conditions`).
    pub fn to_proto(&self) -> pb::RouteMatch {
        let (path_prefix, path_exact) = match &self.path {
            Some(PathMatch::Prefix(p)) => (p.clone(), String::new()),
            Some(PathMatch::Exact(p)) => (String::new(), p.clone()),
            None => (String::new(), String::new()),
        };
        pb::RouteMatch {
            path_prefix,
            path_exact,
            host: self
                .host
                .as_ref()
                .map(HostMatch::pattern)
                .unwrap_or_default(),
            headers: self
                .headers
                .iter()
                .map(|h| pb::HeaderMatch {
                    name: h.name.clone(),
                    exact: h.exact.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::compile::{conditions, route_format};
    use super::super::model::HeaderMatch;
    use super::*;

    #[test]
    fn route_conditions_written_to_a_snapshot_read_back_the_same() {
        let all = RouteConditions {
            path: Some(PathMatch::Exact("/v1/models/fraud:predict".into())),
            host: Some(HostMatch::parse("*.Example.com").unwrap()),
            headers: vec![
                HeaderMatch {
                    name: "x-model".into(),
                    exact: Some("fraud".into()),
                },
                HeaderMatch {
                    name: "x-tenant".into(),
                    exact: None,
                },
            ],
        };
        assert_eq!(all.host, Some(HostMatch::Subdomain(".example.com".into())));
        for c in [all, RouteConditions::default()] {
            assert_eq!(conditions(c.to_proto(), "r").unwrap(), c, "{c}");
        }
    }

    #[test]
    fn a_format_written_to_a_snapshot_route_reads_back_the_same() {
        for format in [
            Format::KserveV1,
            Format::KserveV2 { packed: true },
            Format::KserveV2Grpc { packed: true },
            Format::KserveV2Grpc { packed: false },
            Format::Json {
                entity_pointer: "/rows".into(),
                inject_pointer: "/features".into(),
            },
            Format::Header {
                features_header: "x-my-features".into(),
                max_header_bytes: 4096,
                encoding: HeaderEncoding::ProtobufBase64,
            },
            Format::FeastRest,
        ] {
            let mut r = pb::Route::default();
            format.write_to(&mut r);
            assert_eq!(
                route_format(&r, &[]),
                Ok(format.clone()),
                "{}",
                format.word()
            );
        }
    }
}
