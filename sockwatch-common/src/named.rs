//! One declaration for the numbered, named enums of the contract.

/// Declares a `#[repr]` enum with its numbers and names once, and derives from that one list
/// `ALL` (declaration order), `from_repr` (the number back to the variant) and `name` (what
/// outputs, metrics and labels print). Names are the variants' snake_case forms, which serde
/// also uses.
macro_rules! named_enum {
    // `serde`: also (de)serialized by name under the `user` feature.
    (
        serde;
        $(#[$meta:meta])*
        pub enum $name:ident: $repr:ty { $($body:tt)* }
    ) => {
        named_enum! {
            $(#[$meta])*
            #[cfg_attr(
                feature = "user",
                derive(serde::Serialize, serde::Deserialize),
                serde(rename_all = "snake_case")
            )]
            pub enum $name: $repr { $($body)* }
        }
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $repr:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $num:literal => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[repr($repr)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $num, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [Self; [$($text),+].len()] = [$(Self::$variant),+];

            /// The variant numbered `v`, if there is one.
            pub fn from_repr(v: $repr) -> Option<Self> {
                Self::ALL.into_iter().find(|x| *x as $repr == v)
            }

            /// The variant's name in outputs, metrics and labels.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }
        }
    };
}
