//! Partner pricing: pure integer arithmetic on cents and basis points.
//!
//! - The headline discount is the partner's override if set, else its tier's.
//! - `your_price` is the list price less the headline discount, rounded up to
//!   the cent, and never below the plan's cost floor.
//! - If that price is above the list price, or the plan has no usable price
//!   (a list price of zero or less, a negative floor), the plan is
//!   unavailable to that partner.
//! - The per-plan discount is the headline when the floor did not bite, else
//!   what the floor-clamped price really gives, rounded down.

/// Basis points in one whole.
pub(crate) const BPS_SCALE: i64 = 10_000;

/// Where a partner's discount comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PriceSource {
    /// The discount of the named tier.
    Tier(String),
    /// An operator's override for this partner.
    Override,
}

impl PriceSource {
    /// The spec's form: `tier:<tier>` or `override`.
    pub fn label(&self) -> String {
        match self {
            PriceSource::Tier(tier) => format!("tier:{tier}"),
            PriceSource::Override => "override".to_owned(),
        }
    }
}

/// A partner's headline discount.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Basis points, 0 to 10000.
    pub discount_bps: i64,
    /// Its origin.
    pub source: PriceSource,
}

impl Rate {
    /// The override if set, else the tier's discount.
    pub fn headline(override_bps: Option<i64>, tier: &str, tier_bps: i64) -> Self {
        match override_bps {
            Some(bps) => Rate {
                discount_bps: bps.clamp(0, BPS_SCALE),
                source: PriceSource::Override,
            },
            None => Rate {
                discount_bps: tier_bps.clamp(0, BPS_SCALE),
                source: PriceSource::Tier(tier.to_owned()),
            },
        }
    }
}

/// A plan's price for one partner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitPrice {
    /// What the partner pays per unit, in cents.
    pub unit_cents: i64,
    /// The discount the partner really gets on this plan.
    pub discount_bps: i64,
}

/// Why a plan cannot be priced for a partner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The list price is zero or less, or the floor is negative.
    NoUsablePrice,
    /// The cost floor is above the list price.
    FloorAboveList,
}

impl Unavailable {
    /// The reason given to a partner by the order route.
    pub fn reason(self) -> &'static str {
        match self {
            Unavailable::NoUsablePrice => "The plan has no usable price.",
            Unavailable::FloorAboveList => "The plan's cost floor is above its retail price.",
        }
    }
}

/// The unit price of a plan for a partner with `discount_bps`.
pub(crate) fn unit_price(
    list_cents: i64,
    floor_cents: i64,
    discount_bps: i64,
) -> Result<UnitPrice, Unavailable> {
    if list_cents <= 0 || floor_cents < 0 {
        return Err(Unavailable::NoUsablePrice);
    }
    let discount_bps = discount_bps.clamp(0, BPS_SCALE);
    let discounted = ceil_div(list_cents * (BPS_SCALE - discount_bps), BPS_SCALE);
    let unit_cents = discounted.max(floor_cents);
    if unit_cents > list_cents {
        return Err(Unavailable::FloorAboveList);
    }
    let effective = if unit_cents == discounted {
        discount_bps
    } else {
        discount_from_prices(list_cents, unit_cents)
    };
    Ok(UnitPrice {
        unit_cents,
        discount_bps: effective,
    })
}

/// The discount two stored prices imply, rounded down (what an order reports).
pub(crate) fn discount_from_prices(list_cents: i64, unit_cents: i64) -> i64 {
    if list_cents <= 0 {
        return 0;
    }
    ((list_cents - unit_cents).max(0) * BPS_SCALE) / list_cents
}

/// The total of `quantity` units, or `None` on overflow.
pub(crate) fn total(unit_cents: i64, quantity: i64) -> Option<i64> {
    unit_cents.checked_mul(quantity)
}

fn ceil_div(numerator: i64, denominator: i64) -> i64 {
    (numerator + denominator - 1) / denominator
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_tier_discount_rounds_up_to_the_cent() {
        // 999 less 15% = 849.15 -> 850
        assert_eq!(
            unit_price(999, 0, 1500),
            Ok(UnitPrice {
                unit_cents: 850,
                discount_bps: 1500
            })
        );
        assert_eq!(unit_price(1000, 0, 0).unwrap().unit_cents, 1000);
        assert_eq!(unit_price(1000, 0, 10_000).unwrap().unit_cents, 0);
    }

    #[test]
    fn the_floor_clamps_and_lowers_the_per_plan_discount() {
        let price = unit_price(1000, 900, 2000).unwrap();
        assert_eq!(price.unit_cents, 900);
        assert_eq!(price.discount_bps, 1000);
    }

    #[test]
    fn unusable_prices_and_floors_above_list_are_unavailable() {
        assert_eq!(unit_price(0, 0, 500), Err(Unavailable::NoUsablePrice));
        assert_eq!(unit_price(-5, 0, 500), Err(Unavailable::NoUsablePrice));
        assert_eq!(unit_price(1000, -1, 500), Err(Unavailable::NoUsablePrice));
        assert_eq!(
            unit_price(1000, 1001, 500),
            Err(Unavailable::FloorAboveList)
        );
        assert_eq!(unit_price(1000, 1001, 0), Err(Unavailable::FloorAboveList));
    }

    #[test]
    fn the_headline_is_the_override_else_the_tier() {
        let tier = Rate::headline(None, "gold", 1500);
        assert_eq!(tier.discount_bps, 1500);
        assert_eq!(tier.source.label(), "tier:gold");
        let over = Rate::headline(Some(2200), "gold", 1500);
        assert_eq!(over.discount_bps, 2200);
        assert_eq!(over.source.label(), "override");
    }

    proptest! {
        #[test]
        fn never_below_floor_nor_above_list(list in 1i64..10_000_000, floor_pct in 0i64..120, bps in 0i64..=10_000) {
            let floor = list * floor_pct / 100;
            match unit_price(list, floor, bps) {
                Ok(price) => {
                    prop_assert!(price.unit_cents >= floor);
                    prop_assert!(price.unit_cents <= list);
                    prop_assert!(price.discount_bps >= 0 && price.discount_bps <= bps);
                }
                Err(reason) => {
                    prop_assert_eq!(reason, Unavailable::FloorAboveList);
                    prop_assert!(floor > list);
                }
            }
        }

        #[test]
        fn the_discount_agrees_with_the_two_prices(list in 1i64..10_000_000, floor_pct in 0i64..100, bps in 0i64..=10_000) {
            let floor = list * floor_pct / 100;
            let price = unit_price(list, floor, bps).unwrap();
            let implied = discount_from_prices(list, price.unit_cents);
            // Rounding the price up can only cost the partner less than one cent.
            prop_assert!(implied <= price.discount_bps);
            prop_assert!((price.discount_bps - implied) * list < BPS_SCALE + list);
            // And the price is exactly what the discount says, rounded up, unless the floor bit.
            if price.discount_bps == bps {
                prop_assert_eq!(price.unit_cents, (list * (BPS_SCALE - bps) + BPS_SCALE - 1) / BPS_SCALE);
            } else {
                prop_assert_eq!(price.unit_cents, floor);
            }
        }

        #[test]
        fn a_deeper_discount_never_costs_more(list in 1i64..10_000_000, floor_pct in 0i64..120, a in 0i64..=10_000, b in 0i64..=10_000) {
            let floor = list * floor_pct / 100;
            let (shallow, deep) = (a.min(b), a.max(b));
            match (unit_price(list, floor, shallow), unit_price(list, floor, deep)) {
                (Ok(s), Ok(d)) => prop_assert!(d.unit_cents <= s.unit_cents),
                (Err(x), Err(y)) => prop_assert_eq!(x, y),
                _ => prop_assert!(false, "availability must not depend on the discount"),
            }
        }

        #[test]
        fn total_is_unit_times_quantity(unit in 0i64..10_000_000, quantity in 1i64..=50) {
            prop_assert_eq!(total(unit, quantity), Some(unit * quantity));
        }
    }
}
