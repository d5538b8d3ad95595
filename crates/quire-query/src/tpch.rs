//! TPC-H: the tables as Parquet, made in this process by `tpchgen`, and the queries the
//! benchmark runs.
//!
//! One Parquet file per table (`lineitem.parquet`, …), Snappy-compressed, row groups of
//! 1 Mi rows (`lineitem` at SF 1: 6 row groups, which DataFusion scans in parallel). The
//! files are made once per scale factor and kept: a directory holding the marker file
//! [`DONE`] is complete.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use datafusion::arrow::record_batch::RecordBatchReader;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

/// The eight tables.
pub const TABLES: [&str; 8] = [
    "lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region",
];

/// The file that says a directory's tables are complete.
pub const DONE: &str = "tables.done";

/// A scale factor as a directory name: `sf1`, `sf0.1`.
pub fn sf_name(sf: f64) -> String {
    format!("sf{sf}")
}

type Batches = Box<dyn RecordBatchReader>;

/// The batches of one table at scale factor `sf`.
fn batches(table: &str, sf: f64) -> anyhow::Result<Batches> {
    const BATCH: usize = 64 * 1024;
    Ok(match table {
        "lineitem" => {
            Box::new(LineItemArrow::new(LineItemGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "orders" => Box::new(OrderArrow::new(OrderGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "customer" => {
            Box::new(CustomerArrow::new(CustomerGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "part" => Box::new(PartArrow::new(PartGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "partsupp" => {
            Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "supplier" => {
            Box::new(SupplierArrow::new(SupplierGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "nation" => Box::new(NationArrow::new(NationGenerator::new(sf, 1, 1))),
        "region" => Box::new(RegionArrow::new(RegionGenerator::new(sf, 1, 1))),
        _ => anyhow::bail!("no TPC-H table {table:?}"),
    })
}

/// Makes the tables of scale factor `sf` as Parquet files in `dir`, unless they are there
/// already. Returns whether it made them.
pub fn generate(dir: &Path, sf: f64) -> anyhow::Result<bool> {
    anyhow::ensure!(
        sf > 0.0 && sf <= 100.0,
        "scale factor {sf}: give one in (0, 100]"
    );
    if dir.join(DONE).is_file() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(1 << 20))
        .build();
    for table in TABLES {
        let path = dir.join(format!("{table}.parquet"));
        let tmp = dir.join(format!("{table}.parquet.tmp"));
        let it = batches(table, sf)?;
        let schema = it.schema();
        let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props.clone()))?;
        for b in it {
            w.write(&b?)?;
        }
        w.close()?;
        std::fs::rename(&tmp, &path)?;
    }
    std::fs::write(dir.join(DONE), format!("TPC-H scale factor {sf}\n"))?;
    Ok(true)
}

/// A query the benchmark runs: its TPC-H number and its SQL (the specification's text with
/// its validation parameters, as DataFusion's own TPC-H benchmark has them).
pub struct Query {
    pub number: u32,
    pub sql: &'static str,
}

/// The queries, chosen to cover what a Parquet reader over object storage does (each runs at
/// SF 1 in well under a GiB of memory here): scans of `lineitem` with filters that prune
/// columns and pages (1, 6, 14, 19), joins of three to six tables (3, 5, 10), and
/// `orders`⋈`lineitem` with a semi join (4) or a filter on three dates (12).
pub const QUERIES: &[Query] = &[
    Query {
        number: 1,
        sql: "select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty,
  sum(l_extendedprice) as sum_base_price,
  sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
  sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
  avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price, avg(l_discount) as avg_disc,
  count(*) as count_order
from lineitem
where l_shipdate <= date '1998-12-01' - interval '90' day
group by l_returnflag, l_linestatus
order by l_returnflag, l_linestatus",
    },
    Query {
        number: 3,
        sql: "select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate,
  o_shippriority
from customer, orders, lineitem
where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey
  and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15'
group by l_orderkey, o_orderdate, o_shippriority
order by revenue desc, o_orderdate
limit 10",
    },
    Query {
        number: 4,
        sql: "select o_orderpriority, count(*) as order_count
from orders
where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-07-01' + interval '3' month
  and exists (select * from lineitem where l_orderkey = o_orderkey and l_commitdate < l_receiptdate)
group by o_orderpriority
order by o_orderpriority",
    },
    Query {
        number: 5,
        sql: "select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'ASIA' and o_orderdate >= date '1994-01-01'
  and o_orderdate < date '1994-01-01' + interval '1' year
group by n_name
order by revenue desc",
    },
    Query {
        number: 6,
        sql: "select sum(l_extendedprice * l_discount) as revenue
from lineitem
where l_shipdate >= date '1994-01-01' and l_shipdate < date '1994-01-01' + interval '1' year
  and l_discount between 0.06 - 0.01 and 0.06 + 0.01 and l_quantity < 24",
    },
    Query {
        number: 10,
        sql: "select c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) as revenue, c_acctbal,
  n_name, c_address, c_phone, c_comment
from customer, orders, lineitem, nation
where c_custkey = o_custkey and l_orderkey = o_orderkey and o_orderdate >= date '1993-10-01'
  and o_orderdate < date '1993-10-01' + interval '3' month and l_returnflag = 'R'
  and c_nationkey = n_nationkey
group by c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment
order by revenue desc
limit 20",
    },
    Query {
        number: 12,
        sql: "select l_shipmode,
  sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end)
    as high_line_count,
  sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH' then 1 else 0 end)
    as low_line_count
from orders, lineitem
where o_orderkey = l_orderkey and l_shipmode in ('MAIL', 'SHIP')
  and l_commitdate < l_receiptdate and l_shipdate < l_commitdate
  and l_receiptdate >= date '1994-01-01' and l_receiptdate < date '1994-01-01' + interval '1' year
group by l_shipmode
order by l_shipmode",
    },
    Query {
        number: 14,
        sql: "select 100.00 * sum(case when p_type like 'PROMO%' then l_extendedprice * (1 - l_discount)
  else 0 end) / sum(l_extendedprice * (1 - l_discount)) as promo_revenue
from lineitem, part
where l_partkey = p_partkey and l_shipdate >= date '1995-09-01'
  and l_shipdate < date '1995-09-01' + interval '1' month",
    },
    Query {
        number: 19,
        sql: "select sum(l_extendedprice * (1 - l_discount)) as revenue
from lineitem, part
where (p_partkey = l_partkey and p_brand = 'Brand#12'
    and p_container in ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG')
    and l_quantity >= 1 and l_quantity <= 1 + 10 and p_size between 1 and 5
    and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')
  or (p_partkey = l_partkey and p_brand = 'Brand#23'
    and p_container in ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK')
    and l_quantity >= 10 and l_quantity <= 10 + 10 and p_size between 1 and 10
    and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')
  or (p_partkey = l_partkey and p_brand = 'Brand#34'
    and p_container in ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG')
    and l_quantity >= 20 and l_quantity <= 20 + 10 and p_size between 1 and 15
    and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')",
    },
];

/// The queries numbered in `numbers` (all of [`QUERIES`] when empty).
pub fn select(numbers: &[u32]) -> anyhow::Result<Vec<&'static Query>> {
    if numbers.is_empty() {
        return Ok(QUERIES.iter().collect());
    }
    numbers
        .iter()
        .map(|n| {
            QUERIES.iter().find(|q| q.number == *n).with_context(|| {
                format!(
                    "query {n} is not one this benchmark runs ({})",
                    QUERIES
                        .iter()
                        .map(|q| q.number.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_at_least_eight_and_distinct() {
        assert!(QUERIES.len() >= 8);
        let mut n: Vec<u32> = QUERIES.iter().map(|q| q.number).collect();
        n.dedup();
        assert_eq!(n.len(), QUERIES.len());
        assert!(select(&[2]).is_err());
        assert_eq!(select(&[6]).unwrap()[0].number, 6);
    }
}
