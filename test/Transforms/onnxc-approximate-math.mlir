// RUN: onnx-opt %s --split-input-file -p onnxc-approximate-math | filecheck %s
// RUN: onnx-opt %s --split-input-file -p 'onnxc-approximate-math{functions=exp use-fma=false}' | filecheck %s --check-prefix=ONLYEXP

// Scalar f32 exp: range reduction (roundeven), a polynomial in fma, 2^n built in the exponent
// field (shift + bitcast), NaN passed through with a select; no math.exp left.
// CHECK-LABEL: func.func @exp_scalar
// CHECK-NOT: math.exp
// CHECK: math.roundeven %{{.*}} : f32
// CHECK: math.fma %{{.*}} : f32
// CHECK: arith.fptosi %{{.*}} : f32 to i32
// CHECK: arith.shli %{{.*}} : i32
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK: arith.cmpf uno
// CHECK: arith.select
// CHECK-NOT: math.exp
// CHECK: return
// ONLYEXP-LABEL: func.func @exp_scalar
// ONLYEXP-NOT: math.exp
// ONLYEXP-NOT: math.fma
// ONLYEXP: arith.mulf
// ONLYEXP: return
func.func @exp_scalar(%x: f32) -> f32 {
  %0 = math.exp %x : f32
  return %0 : f32
}

// -----

// Vector operands keep their shape: every constant is a splat of the same vector type and the
// integer part uses vector<...xi32>.
// CHECK-LABEL: func.func @exp_vector
// CHECK-NOT: math.exp
// CHECK: arith.constant dense<{{.*}}> : vector<4x8xf32>
// CHECK: math.fma %{{.*}} : vector<4x8xf32>
// CHECK: arith.constant dense<{{.*}}> : vector<4x8xi32>
// CHECK: arith.bitcast %{{.*}} : vector<4x8xi32> to vector<4x8xf32>
// CHECK: return %{{.*}} : vector<4x8xf32>
func.func @exp_vector(%x: vector<4x8xf32>) -> vector<4x8xf32> {
  %0 = math.exp %x : vector<4x8xf32>
  return %0 : vector<4x8xf32>
}

// -----

// tanh: polynomial for small |x| and exp-based formula above, selected; the sign comes from x.
// erf: rational function, +-1 past the clamp. log: exponent from the bits, polynomial.
// CHECK-LABEL: func.func @tanh_erf_log
// CHECK-NOT: math.tanh
// CHECK-NOT: math.erf
// CHECK-NOT: math.log
// CHECK: arith.cmpf ult
// CHECK: math.copysign
// CHECK: arith.divf
// CHECK: math.copysign
// CHECK: arith.shrui
// CHECK: arith.andi
// CHECK: arith.sitofp
// CHECK-NOT: math.tanh
// CHECK-NOT: math.erf
// CHECK-NOT: math.log
// CHECK: return
// ONLYEXP-LABEL: func.func @tanh_erf_log
// ONLYEXP: math.tanh
// ONLYEXP: math.erf
// ONLYEXP: math.log
func.func @tanh_erf_log(%x: vector<16xf32>) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>) {
  %0 = math.tanh %x : vector<16xf32>
  %1 = math.erf %x : vector<16xf32>
  %2 = math.log %x : vector<16xf32>
  return %0, %1, %2 : vector<16xf32>, vector<16xf32>, vector<16xf32>
}

// -----

// Half types are computed in f32 and rounded back; f64 stays a libm call.
// CHECK-LABEL: func.func @widths
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: math.fma
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK: arith.extf %{{.*}} : vector<8xbf16> to vector<8xf32>
// CHECK: arith.truncf %{{.*}} : vector<8xf32> to vector<8xbf16>
// CHECK: math.exp %{{.*}} : f64
// CHECK: return
func.func @widths(%a: f16, %b: vector<8xbf16>, %c: f64) -> (f16, vector<8xbf16>, f64) {
  %0 = math.exp %a : f16
  %1 = math.exp %b : vector<8xbf16>
  %2 = math.exp %c : f64
  return %0, %1, %2 : f16, vector<8xbf16>, f64
}

// -----

// powf with a constant exponent: x^2 is one multiply, x^-1 a division, x^0.75 sqrt(x) times
// sqrt(sqrt(x)) (with -inf -> +inf selected); an exponent that is not a multiple of 1/4, or a
// variable one, stays powf.
// CHECK-LABEL: func.func @powers
// CHECK-DAG: %[[SQ:.*]] = arith.mulf %[[X:.*]], %[[X]] : f32
// CHECK-DAG: arith.divf %{{.*}}, %[[X]] : f32
// CHECK-DAG: %[[R:.*]] = math.sqrt %[[XP:.*]] : f32
// CHECK-DAG: %[[RR:.*]] = math.sqrt %[[R]] : f32
// CHECK-DAG: arith.mulf %[[R]], %[[RR]] : f32
// CHECK-DAG: math.powf %[[X]], %{{.*}} : f32
// CHECK-DAG: math.powf %[[X]], %[[Y:.*]] : f32
// CHECK: return %[[SQ]],
func.func @powers(%x: f32, %y: f32) -> (f32, f32, f32, f32, f32) {
  %two = arith.constant 2.0 : f32
  %minus_one = arith.constant -1.0 : f32
  %three_quarters = arith.constant 0.75 : f32
  %odd = arith.constant 0.3 : f32
  %0 = math.powf %x, %two : f32
  %1 = math.powf %x, %minus_one : f32
  %2 = math.powf %x, %three_quarters : f32
  %3 = math.powf %x, %odd : f32
  %4 = math.powf %x, %y : f32
  return %0, %1, %2, %3, %4 : f32, f32, f32, f32, f32
}

// -----

// Inside a linalg body (where the lowering puts them, before vectorization).
// CHECK-LABEL: func.func @in_generic
// CHECK: linalg.generic
// CHECK-NOT: math.exp
// CHECK: math.fma
// CHECK: linalg.yield
#map = affine_map<(d0) -> (d0)>
func.func @in_generic(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<?xf32>) outs(%b : tensor<?xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  } -> tensor<?xf32>
  return %0 : tensor<?xf32>
}
