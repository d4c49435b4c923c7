//! The API versions the emulator answers, the host each answers as, and the product
//! name each has in the quota table.

pub const CLB_VERSION: &str = "2014-05-15";
pub const NLB_VERSION: &str = "2022-04-30";
pub const STS_VERSION: &str = "2015-04-01";
pub const ECS_VERSION: &str = "2014-05-26";
pub const VPC_VERSION: &str = "2016-04-28";

pub(crate) fn host_id(version: &str, region: &str) -> String {
    match version {
        NLB_VERSION => format!("nlb.{region}.aliyuncs.com"),
        ECS_VERSION => format!("ecs.{region}.aliyuncs.com"),
        VPC_VERSION => format!("vpc.{region}.aliyuncs.com"),
        STS_VERSION => "sts.aliyuncs.com".to_string(),
        _ => format!("slb.{region}.aliyuncs.com"),
    }
}

/// The product name of an API version, as the quota table and `--api-rate-limit`
/// spell it; `None` for STS, which is not rate-limited here.
pub(crate) fn quota_product(version: &str) -> Option<&'static str> {
    match version {
        CLB_VERSION => Some("slb"),
        NLB_VERSION => Some("nlb"),
        ECS_VERSION => Some("ecs"),
        VPC_VERSION => Some("vpc"),
        _ => None,
    }
}
