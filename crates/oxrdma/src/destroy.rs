//! Destroying verbs objects: `drop` destroys and ignores failure (a busy PD stays
//! allocated until the device closes), `try_destroy` reports it and hands the object back,
//! as `ibv_dealloc_pd` and friends return EBUSY.

/// For each `Type.handle => engine_method;`: `Type::try_destroy` and `Drop`, both calling
/// `engine.engine_method(self.handle)` once; the type has `ctx` and `live` fields. With
/// `, events Source`, the object's asynchronous events stop going to its context; with
/// `, then method`, `self.method()` runs once it is destroyed.
macro_rules! destroy_with {
    ($($(#[$doc:meta])* $ty:ident . $handle:ident => $destroy:ident $(, events $src:ident)? $(, then $then:ident)?;)*) => {$(
        impl $ty {
            $(#[$doc])*
            /// On failure the object comes back with the error, still usable.
            pub fn try_destroy(mut self) -> std::result::Result<(), (Self, crate::Error)> {
                let r = self.ctx.shared().lock().engine.$destroy(self.$handle);
                match r {
                    Ok(()) => {
                        self.live = false;
                        $(self.ctx.shared().owners.release(crate::events::Source::$src(self.$handle));)?
                        $(self.$then();)?
                        Ok(())
                    }
                    Err(e) => Err((self, e.into())),
                }
            }
        }

        impl Drop for $ty {
            fn drop(&mut self) {
                if self.live {
                    let r = self.ctx.shared().lock().engine.$destroy(self.$handle);
                    $(self.ctx.shared().owners.release(crate::events::Source::$src(self.$handle));)?
                    if r.is_ok() {
                        $(self.$then();)?
                    }
                }
            }
        }
    )*};
}

pub(crate) use destroy_with;
