//! A run that fails says where the packets it received went: a peer that "sends nothing"
//! is usually a peer whose packets something dropped.

use oxrdma::Context;

/// `r`, with the device's receive drops added to its error when there were any (an error
/// with nothing dropped stays one line).
pub fn explain<T>(ctx: &Context, r: anyhow::Result<T>) -> anyhow::Result<T> {
    r.map_err(|e| {
        let drops = ctx.rx_drops();
        if drops.any() {
            anyhow::anyhow!("{e:#}\n  receive path of {}: {drops}", ctx.gid().ip())
        } else {
            e
        }
    })
}
